"""The exactly-once protocol for one partition: claim -> pages -> bulk -> acknowledge -> complete.

One object, one process, no engine: Spark tasks, the tests and verify/repair all run partitions
through :class:`PartitionWorker`. A partition's cursor moves only after the target acknowledged
every document before it (a bulk answers only once its items are durable), so a crash loses at
most the unacknowledged tail, which the next claim re-reads. Every store update carries the claim
token; a worker whose claim was taken over stops touching the partition.

How batches reach the target and are acknowledged is one of two protocols behind one interface
(:mod:`sparkindex.worker.writes`), chosen per claim by the target: staged
(:mod:`~sparkindex.worker.staged_writes`: private stages the finish adopts) or bulk
(:mod:`~sparkindex.worker.bulk_writes`: straight into the index, bulks overlapping the reads).
This module reads and builds the batches, and turns what ends an attempt into its outcome.

A claim is a lease (:mod:`sparkindex.worker.lease`): the worker writes only while it can prove
the claim is still its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.exc import DBAPIError

from sparkindex.coordination.base import reruns_until
from sparkindex.coordination.latency import LatencyHistogram
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
from sparkindex.retry import retry_transient
from sparkindex.sources.base import KeyRange
from sparkindex.targets.writer import TargetWriter
from sparkindex.worker.bulk_writes import BulkWrites
from sparkindex.worker.lease import Lease
from sparkindex.worker.settings import WorkerSettings
from sparkindex.worker.staged_writes import StagedWrites
from sparkindex.worker.writes import Batch, Claim, PartitionWrites

log = logging.getLogger(__name__)

OutcomeStatus = Literal["completed", "released", "failed", "closed", "lost", "skipped"]
STOP_CHECK_INTERVAL_S = 2.0


@dataclass(frozen=True)
class PartitionOutcome:
    partition_id: str
    entity: str
    status: OutcomeStatus
    indexed: int = 0
    failed: int = 0
    seconds: float = 0.0
    error: str | None = None


class PartitionWorker:
    """Runs partitions of one job against one store, source and target (one per process)."""

    def __init__(
        self,
        store: CoordinationStore,
        target: TargetWriter,
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
            rec = self.store.partition_rows.claim(
                partition_id, owner, self.run_id, self.s.claim_timeout_s, take_over_run
            )
        except PartitionNotFound:
            self.store.partition_rows.count_partition_not_found(self.job_id)
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
        job = self.store.job_rows.job(self.job_id)
        if job.run_id is not None and job.run_id != self.run_id:
            raise LockLost(f"job {self.job_id} is now run by {job.run_id}, not by this task's run {self.run_id}")
        return job.status == JobStatus.STOPPING


class _Attempt:
    """One claim of one partition, from its cursor to an outcome.

    It reads pages from the cursor and builds batches; its writes (staged or bulk, see
    :mod:`sparkindex.worker.writes`) take each batch to the target and acknowledge it. If the
    target lost applied writes (its writer restarted), the attempt rewinds to its last
    acknowledged cursor and reads them again.
    """

    def __init__(self, worker: PartitionWorker, rec: PartitionRecord, lease: Lease) -> None:
        self.w = worker
        self.rec = rec
        self.lease = lease
        self.builder = worker.builder(rec.entity)
        self.index = worker.indexes[rec.entity]
        self.after = rec.cursor  # where the next page starts
        self.rewinds = 0
        #: how the batches reach the target (opened with the first stage, if the target stages)
        self.writes: PartitionWrites | None = None

    @property
    def indexed(self) -> int:
        return 0 if self.writes is None else self.writes.indexed

    @property
    def failed(self) -> int:
        return 0 if self.writes is None else self.writes.failed

    def run(self) -> tuple[OutcomeStatus, str | None]:
        rec, s = self.rec, self.w.s
        try:
            return self._run()
        except TransientError as exc:
            # The target stayed down beyond our retries, or kept rejecting items as busy (429,
            # 503): stop reading this partition and park it (CLOSED until reopen_at, cursor kept:
            # the unacknowledged batches are written again) rather than hammer a struggling
            # target or write the items off as dead letters.
            parked = self._outcome_saved(
                self.w.store.partition_rows.close_partition, s.reopen_after_s, f"target: {exc}"
            )
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
            unsaved = self._outcome_saved(self.w.store.partition_rows.fail, str(exc), s.partition_retries)
            return ("failed", str(exc)) if unsaved is None else ("lost", unsaved)
        except DBAPIError as exc:
            if not self.lease.expired():
                raise
            # A store call gave up at the end of the lease (reruns_until): the store is down.
            return self._give_up(
                LeaseExpired(f"partition {rec.id}: the store did not answer before the lease ran out: {exc}")
            )
        finally:
            if self.writes is not None:
                self.writes.close()  # unacknowledged: a later claim reads it again from the cursor

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
        if self.writes is not None:
            self.writes.settle()
        try:
            self.w.store.partition_rows.release(self.rec.id, self.rec.claim_token)
        except (LockLost, DBAPIError, TransientError) as err:
            log.info("partition %s not released (left to expire): %s", self.rec.id, err)
        return "lost", str(exc)

    def _run(self) -> tuple[OutcomeStatus, str | None]:
        w = self.w
        claim = Claim(w.store, w.target, w.job_id, self.rec, self.index, self.lease, w.s)
        latency = LatencyHistogram.from_json(self.rec.bulk_latency)  # earlier attempts included
        self.writes = writes = StagedWrites.open(claim, latency) or BulkWrites(claim, latency)
        while True:
            try:
                writes.before_reading()
                return self._read_and_send(writes)
            except WritesLost as exc:
                self.rewinds += 1
                if self.rewinds > w.s.retries:
                    raise TransientError(f"target keeps losing writes: {exc}") from exc
                log.warning("partition %s: %s; rewinding to the last acknowledged cursor", self.rec.id, exc)
                self.after = writes.rewind()

    def _read_and_send(self, writes: PartitionWrites) -> tuple[OutcomeStatus, str | None]:
        w, rec, s = self.w, self.rec, self.w.s
        page_size = self.builder.plan.config.page_size
        rng = KeyRange(rec.range_start, rec.range_end)
        batch = Batch(cursor=self.after)
        while True:
            self.lease.check()
            if w.stopping():
                writes.send(batch)
                writes.acknowledge_all()
                w.store.partition_rows.release(rec.id, rec.claim_token)
                return "released", None
            try:
                page = self._read(rng, self.after, page_size)
            except TransientError as exc:  # the source stayed unreachable beyond our retries
                writes.send(batch)
                writes.acknowledge_all()
                unsaved = self._outcome_saved(w.store.partition_rows.fail, f"source: {exc}", s.partition_retries)
                return ("failed", str(exc)) if unsaved is None else ("lost", unsaved)
            self._add(batch, page)
            if page.last_key is not None:
                self.after = batch.cursor = page.last_key
            last = page.rows < page_size
            if last or len(batch.items) >= s.batch_size or batch.bytes >= s.batch_bytes:
                writes.send(batch)
                batch = Batch(cursor=self.after)
            if last:
                writes.acknowledge_all(complete=True)
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
    def _add(batch: Batch, page: Page) -> None:
        for d in page.docs:
            batch.items.append(d.bulk_item())  # version and routing included
            batch.bytes += len(d.source)
        batch.build_failures.extend(_failure(f) for f in page.failures)


def _failure(err: DocumentError) -> tuple[str, str, str]:
    return err.doc_id, err.error_class, err.reason


__all__ = ["OutcomeStatus", "PartitionOutcome", "PartitionWorker", "WorkerSettings"]
