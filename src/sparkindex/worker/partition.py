"""The exactly-once protocol for one partition: claim -> pages -> bulk -> acknowledge -> complete.

One object, one process, no engine: Spark tasks, the tests and verify/repair all run partitions
through :class:`PartitionWorker`. A partition's cursor moves only after the target acknowledged
every document before it (a bulk answers only once its items are durable), so a crash loses at
most the unacknowledged tail, which the next claim re-reads. Every store update carries the claim
token; a worker whose claim was taken over stops touching the partition.

Reading and writing overlap: up to ``max_in_flight`` bulks are on their way (background threads)
while the next batch is read and built, and acknowledgements are recorded in order. A target that
makes writes durable in groups (Tantivy's group commit) then never stalls the reader.

A claim is a lease (:mod:`sparkindex.worker.lease`): the worker writes only while it can prove
the claim is still its own.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.exc import DBAPIError

from sparkindex.coordination.base import reruns_until
from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import DocumentBuilder, Page
from sparkindex.errors import (
    DocumentError,
    LeaseExpired,
    LockLost,
    PartitionNotFound,
    PermanentError,
    TransientError,
    WritesLost,
)
from sparkindex.retry import Backoff, retry_transient
from sparkindex.sources.base import KeyRange
from sparkindex.targets.base import BulkItem, Stage, Target
from sparkindex.worker.bulk import BulkOutcome, bulk_with_retries
from sparkindex.worker.in_place import InPlaceWrites
from sparkindex.worker.latency import LatencyHistogram
from sparkindex.worker.lease import Lease

log = logging.getLogger(__name__)

OutcomeStatus = Literal["completed", "released", "failed", "closed", "lost", "skipped"]
STOP_CHECK_INTERVAL_S = 2.0


@dataclass(frozen=True)
class WorkerSettings:
    batch_size: int = 5000
    batch_bytes: int = 16 * 1024 * 1024
    retries: int = 5
    partition_retries: int = 3
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    claim_timeout_s: float = 300.0
    #: how long a partition whose target is down stays CLOSED before it may be claimed again
    reopen_after_s: float = 30.0
    #: bulks on their way while the next batch is read and built (acknowledged in order)
    max_in_flight: int = 2
    #: how often applied batches are made durable and their cursors saved (targets with group
    #: commits); a crash redoes at most about this much work per running partition
    sync_every_s: float = 10.0

    def backoff(self) -> Backoff:
        return Backoff(self.backoff_initial_s, self.backoff_max_s)


@dataclass(frozen=True)
class PartitionOutcome:
    partition_id: str
    entity: str
    status: OutcomeStatus
    indexed: int = 0
    failed: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass
class _Batch:
    """Documents on their way to the target, with what their acknowledgement will record."""

    items: list[BulkItem] = field(default_factory=list)
    build_failures: list[tuple[str, str, str]] = field(default_factory=list)
    bytes: int = 0
    cursor: tuple[Any, ...] | None = None
    #: the cursor the batch starts after (it is made with it; ``cursor`` moves as pages are added)
    start: tuple[Any, ...] | None = field(default=None, init=False)
    #: its number in the write-ahead log of an attempt writing in place (0: not recorded)
    seq: int = 0

    def __post_init__(self) -> None:
        self.start = self.cursor


class PartitionWorker:
    """Runs partitions of one job against one store, source and target (one per process)."""

    def __init__(
        self,
        store: CoordinationStore,
        target: Target,
        builder: Callable[[str], DocumentBuilder],
        job_id: str,
        run_id: str,
        indexes: dict[str, str],
        settings: WorkerSettings,
    ) -> None:
        self.store = store
        self.target = target
        self.builder = builder
        self.job_id = job_id
        self.run_id = run_id
        self.indexes = indexes  # alias -> physical index being built
        self.s = settings
        self._next_stop_check = 0.0

    def run(self, partition_id: str, owner: str, take_over_run: bool = True) -> PartitionOutcome:
        """Claim and run one partition (see :meth:`CoordinationStore.claim` for *take_over_run*);
        "skipped" when it cannot be claimed."""
        started = time.monotonic()
        try:
            rec = self.store.claim(partition_id, owner, self.run_id, self.s.claim_timeout_s, take_over_run)
        except PartitionNotFound:
            self.store.count_partition_not_found(self.job_id)
            raise
        if rec is None:  # the job is stopping, it is finished, or a live process elsewhere holds it
            return PartitionOutcome(partition_id, "", "skipped")
        lease = Lease(self.store, rec, self.s.claim_timeout_s, started)
        lease.start()
        try:
            attempt = _Attempt(self, rec, lease)
            with reruns_until(lease.valid_until):  # no store call outlasts the lease it works under
                status, error = attempt.run()
        finally:
            lease.stop()
        return PartitionOutcome(
            rec.id, rec.entity, status, attempt.indexed, attempt.failed, round(time.monotonic() - started, 3), error
        )

    def stopping(self) -> bool:
        """Whether the job is being stopped (checked every few seconds). Raises :class:`LockLost`
        when another driver's run has taken the job over: this task belongs to a driver that lost
        its lock, and a cancelled Spark task's Python worker runs on until it next writes to the
        JVM, so it must notice by itself."""
        now = time.monotonic()
        if now < self._next_stop_check:
            return False
        self._next_stop_check = now + STOP_CHECK_INTERVAL_S
        job = self.store.job(self.job_id)
        if job.run_id is not None and job.run_id != self.run_id:
            raise LockLost(f"job {self.job_id} is now run by {job.run_id}, not by this task's run {self.run_id}")
        return job.status == JobStatus.STOPPING


class _Attempt:
    """One claim of one partition, from its cursor to an outcome.

    Batches go through three stages: in flight (a bulk on its way, at most ``max_in_flight``),
    applied but not yet durable (targets with group commits), and acknowledged (dead letters,
    cursor and counts saved). A sync, every ``sync_every_s`` and at the end, moves applied batches
    to acknowledged, in order. If the target lost applied writes (its writer restarted), the
    attempt rewinds to its last acknowledged cursor and reads them again.
    """

    def __init__(self, worker: PartitionWorker, rec: PartitionRecord, lease: Lease) -> None:
        self.w = worker
        self.rec = rec
        self.lease = lease
        self.builder = worker.builder(rec.entity)
        self.index = worker.indexes[rec.entity]
        self.indexed = 0
        self.failed = 0
        self.after = rec.cursor  # where the next page starts
        self.acked_cursor = rec.cursor  # what the store knows
        self.rewinds = 0
        self._chunks = 0  # stages this attempt opened
        self._pool = ThreadPoolExecutor(max_workers=worker.s.max_in_flight, thread_name_prefix="bulk")
        self._in_flight: deque[tuple[_Batch, Future[BulkOutcome]]] = deque()
        self._applied: deque[tuple[_Batch, BulkOutcome]] = deque()
        self._last_sync = time.monotonic()
        #: the partition's bulk latency so far (earlier attempts included), saved with progress
        self.latency = LatencyHistogram.from_json(rec.bulk_latency)
        #: the attempt's private writer, where the target stages new versions (see Target.open_stage)
        self.stage: Stage | None = None
        self.staged = False
        #: writes straight into the index: recorded before each bulk, undone by a redo (in_place.py)
        s = worker.s
        self.in_place = InPlaceWrites(
            worker.store, worker.target, worker.job_id, rec, self.index, s.retries, s.backoff()
        )

    def run(self) -> tuple[OutcomeStatus, str | None]:
        rec, s = self.rec, self.w.s
        try:
            return self._run()
        except TransientError as exc:
            # The target stayed down beyond our retries, or kept rejecting items as busy (429,
            # 503): stop reading this partition and park it (CLOSED until reopen_at, cursor kept:
            # the unacknowledged batches are written again) rather than hammer a struggling
            # target or write the items off as dead letters.
            parked = self._outcome_saved(self.w.store.close_partition, s.reopen_after_s, f"target: {exc}")
            return ("closed", str(exc)) if parked is None else ("lost", parked)
        except LeaseExpired as exc:
            return self._give_up(exc)
        except LockLost as exc:
            # the bulks still in flight check the lease before each request and chunk: they stop too
            self.lease.lost = self.lease.lost or str(exc)
            log.warning("%s; leaving the partition to its new owner", exc)
            return "lost", str(exc)
        except PermanentError as exc:
            # Retrying the same read or write will not help (a missing index, a schema that
            # changed under the job): count it against the partition, never fail the Spark job.
            log.error("partition %s: %s", rec.id, exc)
            unsaved = self._outcome_saved(self.w.store.fail, str(exc), s.partition_retries)
            return ("failed", str(exc)) if unsaved is None else ("lost", unsaved)
        except DBAPIError as exc:
            if not self.lease.expired():
                raise
            # A store call gave up at the end of the lease (reruns_until): the store is down.
            return self._give_up(
                LeaseExpired(f"partition {rec.id}: the store did not answer before the lease ran out: {exc}")
            )
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            if self.stage is not None:
                self.stage.discard()  # unacknowledged: a later claim reads it again from the cursor

    def _outcome_saved(self, save: Callable[..., object], *args: Any) -> str | None:
        """Record an attempt's end in the store (``save(partition id, claim token, *args)``);
        None when it is recorded. When the claim was
        lost meanwhile, or the store cannot be reached now (after its reruns), the reason: the
        claim is left to expire and be taken over, cursor kept, and the task ends normally
        rather than with a store error on top of the one it was reporting."""
        try:
            save(self.rec.id, self.rec.claim_token, *args)
        except LockLost as lost:
            return str(lost)
        except (DBAPIError, TransientError) as exc:
            log.warning("partition %s: its outcome could not be recorded (left to expire): %s", self.rec.id, exc)
            return f"the store could not record the outcome: {exc}"
        return None

    def _give_up(self, exc: LeaseExpired) -> tuple[OutcomeStatus, str | None]:
        """The claim cannot be proven any more: write nothing more, let the bulks already on their
        way end (their retries check the lease too), then give the partition back, cursor kept,
        if the store answers and the claim is still ours; one try (the lease is over, so store
        calls no longer rerun): a store that is down leaves the claim to expire and be taken over."""
        log.warning("%s", exc)
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            self.w.store.release(self.rec.id, self.rec.claim_token)
        except (LockLost, DBAPIError, TransientError) as err:
            log.info("partition %s not released (left to expire): %s", self.rec.id, err)
        return "lost", str(exc)

    def _run(self) -> tuple[OutcomeStatus, str | None]:
        self.stage = self._open_stage()
        self.staged = self.stage is not None
        # Written in place, an earlier claim may have left writes nobody acknowledged; so may this
        # one, when its target lost writes and it rewinds. They are undone before reading on.
        undo = not self.staged and self.rec.claims > 1
        while True:
            try:
                if undo:
                    self.in_place.undo(self.acked_cursor, guard=self.lease.check, valid_until=self.lease.valid_until)
                    undo = False
                return self._read_and_send()
            except WritesLost as exc:
                self.rewinds += 1
                if self.rewinds > self.w.s.retries:
                    raise TransientError(f"target keeps losing writes: {exc}") from exc
                log.warning("partition %s: %s; rewinding to the last acknowledged cursor", self.rec.id, exc)
                self._drop_unacknowledged()
                undo = not self.staged

    def _read_and_send(self) -> tuple[OutcomeStatus, str | None]:
        w, rec, s = self.w, self.rec, self.w.s
        page_size = self.builder.plan.config.page_size
        rng = KeyRange(rec.range_start, rec.range_end)
        batch = _Batch(cursor=self.after)
        while True:
            self.lease.check()
            if w.stopping():
                self._send(batch)
                self._acknowledge_all()
                w.store.release(rec.id, rec.claim_token)
                return "released", None
            try:
                page = self._read(rng, self.after, page_size)
            except TransientError as exc:  # the source stayed unreachable beyond our retries
                self._send(batch)
                self._acknowledge_all()
                unsaved = self._outcome_saved(w.store.fail, f"source: {exc}", s.partition_retries)
                return ("failed", str(exc)) if unsaved is None else ("lost", unsaved)
            self._add(batch, page)
            if page.last_key is not None:
                self.after = batch.cursor = page.last_key
            last = page.rows < page_size
            if last or len(batch.items) >= s.batch_size or batch.bytes >= s.batch_bytes:
                self._send(batch)
                batch = _Batch(cursor=self.after)
            if last:
                self._acknowledge_all(complete=True)
                if not self.staged:
                    try:
                        self.in_place.done()
                    except (DBAPIError, TransientError) as exc:  # complete already; gc drops the entries
                        log.warning("partition %s: its write-ahead entries stay until gc: %s", rec.id, exc)
                return "completed", None

    def _read(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        s = self.w.s
        return retry_transient(
            lambda: self.builder.page(rng, after, limit),  # the source maps its failures to TransientError
            f"reading {self.builder.plan.table.name} after {after}",
            s.retries,
            s.backoff(),
        )

    @staticmethod
    def _add(batch: _Batch, page: Page) -> None:
        for d in page.docs:
            batch.items.append(d.bulk_item())  # version and routing included
            batch.bytes += len(d.source)
        batch.build_failures.extend(_failure(f) for f in page.failures)

    # -- the three stages --------------------------------------------------------------------------
    def _send(self, batch: _Batch) -> None:
        """Put *batch* in flight; collect finished bulks; sync when the last sync is old enough."""
        s = self.w.s
        if self.staged:  # every batch of a staged attempt, not only those before its first seal
            self._stage(batch)
            return
        while len(self._in_flight) >= s.max_in_flight:
            self._collect_oldest()
        if batch.items:  # recorded before it is sent, so that a redo can undo it
            pending = [b.seq for b, _ in self._in_flight] + [b.seq for b, _ in self._applied]
            batch.seq = self.in_place.record(batch.start, batch.items, pending)
        future = self._pool.submit(
            bulk_with_retries,
            self.w.target,
            self.index,
            batch.items,
            s.retries,
            s.backoff(),
            unsynced=True,
            guard=self.lease.check,  # before every request: no write once the claim cannot be proven
            valid_until=self.lease.valid_until,  # and no request of the target's outlives the lease
            raise_transient=True,  # still busy after every retry: park the partition, lose nothing
        )
        self._in_flight.append((batch, future))
        while self._in_flight and self._in_flight[0][1].done():
            self._collect_oldest()
        if self._applied and (
            time.monotonic() - self._last_sync >= s.sync_every_s or not any(o.marks for _, o in self._applied)
        ):
            self._sync_and_acknowledge()

    def _open_stage(self) -> Stage | None:
        self._chunks += 1
        return self.w.target.open_stage(self.index, stage_name(self.rec.id, self.rec.claim_token, self._chunks))

    def _stage(self, batch: _Batch) -> None:
        """A staged attempt adds in its own process (Tantivy indexes on its own threads meanwhile);
        every ``sync_every_s`` and at the end it seals the stage and acknowledges what it holds."""
        if self.stage is None:
            self.stage = self._open_stage()
            assert self.stage is not None
        started = time.monotonic()
        self.lease.check()
        rejected = self.stage.add(batch.items) if batch.items else []
        outcome = BulkOutcome(success=len(batch.items) - len(rejected))
        outcome.failures.extend((r.id, r.error_class or "BulkItemError", r.error or "rejected") for r in rejected)
        self.latency.observe(time.monotonic() - started)
        batch.items = []
        self._applied.append((batch, outcome))
        if time.monotonic() - self._last_sync >= self.w.s.sync_every_s:
            self._seal_and_acknowledge(complete=False)

    def _seal_and_acknowledge(self, complete: bool) -> None:
        """Seal the current stage, then record its batches in one write naming it (the store's
        list of a partition's stages is what the finish adopts); a stage sealed but never
        recorded (a crash between the two) is never adopted, and its batches are read again."""
        stage, self.stage = self.stage, None
        name = None
        if stage is not None and self._applied:
            stage.seal()
            name = stage.name
        elif stage is not None:
            stage.discard()
        cursor, success, failures = self.acked_cursor, 0, []
        for batch, outcome in self._applied:
            cursor = batch.cursor if batch.cursor is not None else cursor
            success += outcome.success
            failures.extend([*batch.build_failures, *outcome.failures])
        self._applied.clear()
        self._last_sync = time.monotonic()
        if complete or name is not None:
            self._record(cursor, success, failures, complete, self.latency.to_json(), stage=name)

    def _collect_oldest(self) -> None:
        batch, future = self._in_flight.popleft()
        outcome = future.result()  # TransientError here: the target stayed down
        for seconds in outcome.latencies:
            self.latency.observe(seconds)
        batch.items = []  # the documents are the target's now; keep only what the ack records
        self._applied.append((batch, outcome))

    def _acknowledge_all(self, complete: bool = False) -> None:
        while self._in_flight:
            self._collect_oldest()
        if self.staged:
            self._seal_and_acknowledge(complete)
            return
        if complete and not self._applied:
            self.w.store.complete(self.rec.id, self.rec.claim_token, latency=self.latency.to_json())
            return
        self._sync_and_acknowledge(complete)

    def _sync_and_acknowledge(self, complete: bool = False) -> None:
        """Make every applied batch durable, then record them in order (the last one completing)."""
        marks = [m for _, outcome in self._applied for m in outcome.marks]
        if marks:
            if len({m.epoch for m in marks}) > 1:
                raise WritesLost("the target's writer restarted while batches were unsynced")
            self.w.target.sync(self.index, max(marks, key=lambda m: m.generation))
        self._last_sync = time.monotonic()
        while self._applied:
            batch, outcome = self._applied.popleft()
            last = not self._applied
            latency = self.latency.to_json() if last else None  # once per acknowledgement
            failures = [*batch.build_failures, *outcome.failures]
            self._record(batch.cursor, outcome.success, failures, complete and last, latency)

    def _record(
        self,
        cursor: tuple[Any, ...] | None,
        success: int,
        failures: list[tuple[str, str, str]],
        complete: bool,
        latency: str | None,
        stage: str | None = None,
    ) -> None:
        """Record acknowledged work: its dead letters first, then the cursor and counts in one
        write (completing the partition, or naming the sealed *stage* that holds the work)."""
        rec, store = self.rec, self.w.store
        if failures:
            store.dead_letters.add(self.w.job_id, rec.entity, rec.id, failures)
        if complete:
            store.complete(rec.id, rec.claim_token, cursor, success, len(failures), latency=latency, stage=stage)
        else:
            store.save_progress(rec.id, rec.claim_token, cursor, success, len(failures), latency=latency, stage=stage)
        self.acked_cursor = cursor
        self.indexed += success
        self.failed += len(failures)

    def _drop_unacknowledged(self) -> None:
        """Forget batches the target lost; the next page starts after the last acknowledged one."""
        while self._in_flight:
            _, future = self._in_flight.popleft()
            with contextlib.suppress(TransientError):
                future.result()
        self._applied.clear()
        self.after = self.acked_cursor


def stage_name(partition_id: str, claim_token: int, chunk: int) -> str:
    """Names one stage of one claim of a partition (unique: a claim token is never reused)."""
    return f"{partition_id}.{claim_token}.{chunk}"


def _failure(err: DocumentError) -> tuple[str, str, str]:
    return err.doc_id, err.error_class, err.reason
