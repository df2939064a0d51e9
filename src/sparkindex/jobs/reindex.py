"""A full reindex: lock -> plan or resume -> run on Spark -> finalize -> summary.

The driver decides what work exists (partitions in the store), runs Spark passes until none is
left (moving documents itself only while the JVM starts: :mod:`.head_start`), and only then,
with every partition COMPLETED, the index's count equal to what the partitions acknowledged and
its fencing token still valid, swaps the alias.
Every job update it makes is fenced by its lock tokens: a driver whose lock was taken over can
neither move the job nor touch partitions that the new driver's run owns.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from sqlalchemy.exc import DBAPIError

from sparkindex.capture.sync_errors import brief
from sparkindex.config.model import Pipeline
from sparkindex.coordination.keeper import LockKeeper
from sparkindex.coordination.records import JobRecord, PartitionRecord
from sparkindex.coordination.recovery import holder_is_dead, holder_name
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.fingerprint import plan_fingerprint
from sparkindex.documents.planning import resolve_plans, selected_aliases
from sparkindex.errors import ConfigError, LockHeld, LockLost, PermanentError, SparkIndexError, TransientError
from sparkindex.jobs.finalize import finalize_job
from sparkindex.jobs.head_start import HeadStart
from sparkindex.jobs.job_planning import JobPlanner
from sparkindex.jobs.progress import ProgressListener, SilentProgress, StatsPoller
from sparkindex.resources import open_source, open_store, open_target, wait_for_read_source
from sparkindex.sources.base import Source
from sparkindex.targets.target import Target
from sparkindex.targets.writer import TargetWriter, unmanaged_index_message

log = logging.getLogger(__name__)
P = PartitionStatus


@dataclass
class ReindexSummary:
    job_id: str
    status: str
    alias: str
    index: str
    source_rows: int
    indexed: int
    failed: int
    seconds: float

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @property
    def exit_code(self) -> int:
        return {"COMPLETED": 0, "COMPLETED_WITH_ERRORS": 1}.get(self.status, 3)


def check_store_reachable_by_executors(pipeline: Pipeline) -> None:
    """Executors on other machines cannot share a SQLite file: refuse before any work starts."""
    from sparkindex.spark.session import effective_master

    master = effective_master(pipeline.spark)
    if not master.startswith("local") and pipeline.coordination_url().startswith("sqlite"):
        raise ConfigError(
            f"{pipeline.origin}: coordination.url: SQLite cannot coordinate a Spark cluster "
            f"(spark.master is {master!r}; executors could not share the file); "
            "use a PostgreSQL or MySQL coordination store"
        )


class ReindexJob:
    def __init__(
        self,
        pipeline: Pipeline,
        aliases: Sequence[str] | None = None,
        *,
        new: bool = False,
        adopt: bool = False,
        progress: ProgressListener | None = None,
        spark_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.aliases = sorted(selected_aliases(pipeline, aliases))
        self.new = new
        #: an index that bears an alias's name is replaced by the alias at the swap (else refused)
        self.adopt = adopt
        self.progress = progress or SilentProgress()
        self._spark_factory = spark_factory
        self._spark_future: Future[Any] | None = None  # the session, once started
        self._head_start: HeadStart | None = None  # partitions the driver runs while Spark starts
        self.run_id = uuid.uuid4().hex[:12]
        self.holder = holder_name(self.run_id)
        self.job_group = f"sparkindex-{self.run_id}"

    # -- the whole job -----------------------------------------------------------------------------
    def run(self) -> ReindexSummary:
        """The whole job; a database that stops answering ends it as a transient failure (exit 3:
        a rerun resumes), said in one line rather than as the driver's traceback."""
        try:
            return self._run()
        except DBAPIError as exc:
            stopped = "a database did not answer, so the job stopped (rerun to resume)"
            raise TransientError(f"{stopped}: {brief(exc)}") from exc

    def _run(self) -> ReindexSummary:
        """Open the source, the target and the store for the job's length, and close them at its
        end, however it ends: a process that runs many jobs (a scheduler's worker) keeps none."""
        started = time.monotonic()
        p = self.pipeline
        if self._spark_factory is None:  # a caller's session was judged by its own master (api)
            check_store_reachable_by_executors(p)
        with open_source(p) as source, open_target(p) as target, contextlib.ExitStack() as opened:
            # the partitions' reads (and planning's counts) go to source.read_url when it is set
            self._reads = source if p.source.read_url is None else opened.enter_context(open_source(p, bulk_reads=True))
            plans = resolve_plans(p, source, self.aliases, target)  # config and schema errors first, before any JVM
            # an engine sparkindex cannot serve is refused here too (its first request identifies it)
            unmanaged = {alias for alias in self.aliases if target.unmanaged_index(alias)}
            if unmanaged and not self.adopt:
                raise ConfigError(unmanaged_index_message(min(unmanaged), getattr(target, "ENGINE", "target")))
            if self._spark_factory is None:
                self._start_spark()
            # resolved once, here: shipped to every worker, so all documents follow one plan
            self._plans = {alias: plan for alias, (plan, _) in plans.items()}
            self._mappings = {alias: mapping for alias, (_, mapping) in plans.items()}
            self._fingerprint = plan_fingerprint(plans, p)
            with open_store(p) as store:
                job = self._run_locked(store, source, target, plans)
                # the rows counted where the full load read them (a replica's count(*) spares the primary)
                return self._summary(store, self._reads, target, job, plans, time.monotonic() - started)

    def _run_locked(self, store: CoordinationStore, source: Source, target: Target, plans: dict[str, Any]) -> JobRecord:
        """Lock the aliases, plan or resume the job, run its passes and finalize it; the locks
        are released however it ends."""
        p = self.pipeline
        fingerprint = self._fingerprint
        tokens = self._lock_all(store)  # a held lock (retried later by a scheduler) opens nothing first
        try:
            self.catch_up = self._catch_up(source, store)
        except BaseException:
            for alias, token in tokens.items():
                store.locks.release(alias, token)
            raise
        fence = dict(tokens)
        keeper = LockKeeper(store, tokens, p.job.lock_ttl_s, p.job.lock_refresh_s, on_lost=self._on_lock_lost)
        keeper.start()
        job: JobRecord | None = None
        try:
            for alias, token in tokens.items():
                target.observe_fence(alias, token)
            # What each alias points at now, under our lock: the swap is a compare-and-swap on it.
            previous = {alias: target.alias_target(alias) for alias in self.aliases}
            # an adopted index is what the swap replaces (the alias's own name, see Target.swap)
            previous.update({alias: alias for alias in self.aliases if target.unmanaged_index(alias)})
            planner = JobPlanner(
                p,
                self.aliases,
                store,
                target,
                self.catch_up,
                self.progress,
                new=self.new,
                adopt=self.adopt,
                before_reads=self._wait_for_reads,
            )
            job = planner.resume_or_plan(self._reads, plans, fingerprint, fence)
            for alias, token in tokens.items():
                store.locks.transfer(alias, token, None, job.id)
            store.job_rows.update_job(job.id, fence=fence, run_id=self.run_id)
            job = store.job_rows.transition_job(job.id, JobStatus.RUNNING, fence=fence)
            self._run_passes(store, job, keeper)
            if keeper.lost:
                raise LockLost(keeper.lost)
            self.progress.phase("finalizing: restoring settings, checking counts, swapping aliases")
            self._check_plans_unchanged(target, fingerprint)
            return finalize_job(store, target, job.id, fence, previous, p.job.keep_versions, self.catch_up)
        except BaseException as exc:
            if job is not None:
                self._fail(store, job.id, fence, exc)
            raise
        finally:
            keeper.stop()
            if self.catch_up is not None:
                self.catch_up.close()
            for alias, token in tokens.items():
                try:
                    store.locks.release(alias, token)
                except DBAPIError as exc:  # the lock expires after its TTL; the error above stands
                    log.warning("could not release the lock of %s (it expires): %s", alias, brief(exc))

    def _wait_for_reads(self) -> None:
        """Called by the planner once P0 is recorded, before the first row is read: a read replica
        must have replayed the primary's position by then (which is at or past P0), else the
        partitions would miss changes the catch-up will not replay (refused after
        ``source.max_replica_lag_s``, exit 2)."""
        if self.pipeline.source.read_url is not None:
            self.progress.phase("waiting for the read replica to replay the primary's position")
        wait_for_read_source(self.pipeline, self._reads, f"reindex of {', '.join(self.aliases)}")

    def _catch_up(self, source: Any, store: CoordinationStore) -> Any:
        """Changes committed during the job are replayed before the swap (capture/catch_up.py)."""
        from sparkindex.capture.catch_up import CatchUp, may_catch_up

        if not may_catch_up(self.pipeline, source):
            return None  # nothing recorded for a source that cannot capture changes
        return CatchUp(self.pipeline, source, store, self.aliases, self._spark, self._plans)

    def _lock_all(self, store: CoordinationStore) -> dict[str, int]:
        tokens: dict[str, int] = {}
        try:
            for alias in self.aliases:  # sorted: two jobs never wait on each other in a cycle
                tokens[alias] = store.locks.acquire(
                    alias, self.holder, self.pipeline.job.lock_ttl_s, holder_is_dead=holder_is_dead
                )
        except LockHeld:
            for alias, token in tokens.items():
                store.locks.release(alias, token)
            raise
        return tokens

    def _on_lock_lost(self, reason: str) -> None:
        """Called from the lock keeper's thread: stop our Spark job at once, not at the next pass."""
        log.error("%s; cancelling this driver's Spark job", reason)
        future = self._spark_future
        if self._spark_factory is not None:
            self._spark_factory().sparkContext.cancelJobGroup(self.job_group)
        elif future is not None and future.done() and future.exception() is None:
            future.result().sparkContext.cancelJobGroup(self.job_group)

    # -- running -----------------------------------------------------------------------------------
    def _start_spark(self) -> Future[Any]:
        """Start the SparkSession on a thread while the driver plans: the JVM's start-up (seconds)
        overlaps the schema reads, locking and partition planning instead of following them."""
        if self._spark_future is not None:
            return self._spark_future
        future: Future[Any] = Future()
        self._spark_future = future

        def start() -> None:
            from sparkindex.spark.session import REINDEX_CONF, build_session

            try:
                log_path = self.pipeline.state_dir / "spark.log"
                future.set_result(build_session(self.pipeline.spark, log_path, register=False, extra=REINDEX_CONF))
            except BaseException as exc:  # noqa: BLE001 - raised again by _spark() in the driver's thread
                future.set_exception(exc)

        threading.Thread(target=start, name="sparkindex-spark-start", daemon=True).start()
        return future

    def _spark(self) -> Any:
        if self._spark_factory is not None:
            return self._spark_factory()
        return self._start_spark().result()

    def _run_passes(self, store: CoordinationStore, job: JobRecord, keeper: LockKeeper) -> None:
        p = self.pipeline
        poller = StatsPoller(store, job.id, self.progress)
        poller.start()
        session = None if self._spark_factory is not None else self._spark_future
        if HeadStart.wanted(p, session):
            assert session is not None
            self._head_start = HeadStart(p, job.id, self.run_id, session, self._plans, self._fingerprint)
            self.progress.phase("starting Spark; the driver runs partitions meanwhile")
            self._head_start.start()
        try:
            for n in range(p.job.max_passes):
                store.partition_resets.reclaim_stale(job.id, p.job.claim_timeout_s, p.job.partition_retries)
                self._wait_for_reopened(store, job.id)
                todo = self._todo(store, job.id, keeper.tokens)
                if not todo or store.job_rows.job(job.id).status == JobStatus.STOPPING:
                    break
                if keeper.lost:
                    raise LockLost(keeper.lost)
                self.progress.phase(f"pass {n + 1}: {len(todo)} partitions on Spark")
                self._run_pass(store, job.id, todo, n + 1, dict(keeper.tokens))
        finally:
            self._join_head_start()
            poller.stop()

    def _check_plans_unchanged(self, target: TargetWriter, fingerprint: str) -> None:
        """Resolve the plans again, from a fresh look at the schema, before anything is swapped:
        the workers built from the plans of the job's start, so a schema change since then (a
        column added, a key changed) would leave the new version behind the source's shape."""
        p = self.pipeline
        with open_source(p) as source:
            try:
                now = resolve_plans(p, source, self.aliases, target)
            except ConfigError as exc:
                raise PermanentError(f"{self._changed_schema(self.aliases)}: {exc}") from exc
        if plan_fingerprint(now, p) == fingerprint:
            return
        changed = [a for a in self.aliases if plan_fingerprint({a: now[a]}, p) != self._alias_fingerprint(a)]
        raise PermanentError(self._changed_schema(changed or self.aliases))

    def _alias_fingerprint(self, alias: str) -> str:
        plan = self._plans[alias]
        return plan_fingerprint({alias: (plan, self._mappings[alias])}, self.pipeline)

    def _changed_schema(self, aliases: Sequence[str]) -> str:
        return (
            f"the schema behind alias(es) {', '.join(aliases)} changed while the job ran; its documents follow the "
            "plan the job started with, so the new version was not swapped in. Run "
            f"`sparkindex reindex -c {self.pipeline.origin} --new` to build it on the schema as it is now"
        )

    def _join_head_start(self) -> None:
        head, self._head_start = self._head_start, None
        if head is not None:
            head.join()

    def _run_pass(
        self, store: CoordinationStore, job_id: str, todo: list[PartitionRecord], n: int, fence: dict[str, int]
    ) -> None:
        from sparkindex.spark.partition_job import run_partitions

        spark = self._spark()
        spark.sparkContext.setJobGroup(self.job_group, f"sparkindex reindex {job_id} pass {n}", True)
        try:
            outcomes = run_partitions(spark, self.pipeline, job_id, self.run_id, todo, self._plans, self._fingerprint)
            for o in outcomes:
                if o.status not in ("completed", "skipped"):
                    log.warning("partition %s (%s): %s %s", o.partition_id, o.entity, o.status, o.error or "")
        except Exception as exc:  # noqa: BLE001 - a failed Spark job leaves work for the next pass
            log.error("Spark pass %d failed: %s", n, str(exc).splitlines()[0][:500])
            self.progress.phase(f"pass {n} failed; retrying the unfinished partitions")
        except BaseException:
            # Ctrl-C: the session was started on another thread, so PySpark installed no handler
            # that cancels its jobs; stop our tasks before giving their partitions back.
            spark.sparkContext.cancelJobGroup(self.job_group)
            raise
        finally:
            # None of this run's tasks is running now (the driver's head start finishes its
            # partition first): what they left PROCESSING (a task that Spark gave up on) is
            # released for the next pass instead of waiting for a lease timeout.
            self._join_head_start()
            self._hand_back(store, job_id, fence)

    def _todo(self, store: CoordinationStore, job_id: str, fence: dict[str, int]) -> list[PartitionRecord]:
        """The partitions a pass is to run. With none pending, the head start may hold the last
        ones: it finishes the one in hand, and one it left (it stops when the store goes away
        under it) is handed back and run by a pass, not left for the job to end unfinished."""
        todo = store.partition_rows.partitions(job_id, [P.PENDING, P.CLOSED])
        if todo or self._head_start is None:
            return todo
        self._join_head_start()
        self._hand_back(store, job_id, fence)
        return store.partition_rows.partitions(job_id, [P.PENDING, P.CLOSED])

    def _hand_back(self, store: CoordinationStore, job_id: str, fence: dict[str, int]) -> None:
        """This run's claims go back to PENDING: none of its tasks is running now."""
        try:
            store.partition_resets.reset_run(job_id, self.run_id, fence)
        except DBAPIError as exc:  # the store is down: the claims expire and are reclaimed
            log.warning("could not hand back this run's partitions (their leases expire): %s", brief(exc))

    def _wait_for_reopened(self, store: CoordinationStore, job_id: str) -> None:
        """When only parked (CLOSED) partitions remain, wait until the first may be reopened."""
        if store.partition_rows.partitions(job_id, [P.PENDING]):
            return
        closed = [p.reopen_at or 0.0 for p in store.partition_rows.partitions(job_id, [P.CLOSED])]
        if closed:
            delay = min(closed) - store.now()  # reopen_at is on the store's clock
            if delay > 0:
                self.progress.phase(f"target unavailable; partitions reopen in {delay:.0f} s")
                time.sleep(delay)

    # -- failing -----------------------------------------------------------------------------------
    def _fail(self, store: CoordinationStore, job_id: str, fence: dict[str, int], exc: BaseException) -> None:
        try:
            current = store.job_rows.job(job_id)
            if current.status in (JobStatus.READY, JobStatus.RUNNING, JobStatus.INITIALIZING, JobStatus.STOPPING):
                reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
                store.partition_resets.reset_run(job_id, self.run_id, fence)
                store.job_rows.transition_job(job_id, JobStatus.FAILED, error=reason[:2000], fence=fence)
        except SparkIndexError as inner:
            # LockLost included: the job belongs to another driver now; leave it to that one.
            log.error("could not record the failure of job %s: %s", job_id, inner)
        except DBAPIError as inner:  # the store is down: a rerun's recovery finds the job orphaned
            log.error("could not record the failure of job %s: the store did not answer: %s", job_id, brief(inner))

    def _summary(
        self,
        store: CoordinationStore,
        source: Any,
        target: Any,
        job: JobRecord,
        plans: dict[str, Any],
        seconds: float,
    ) -> ReindexSummary:
        rows = sum(source.count(plan.table) for plan, _ in plans.values())
        indexed = sum(target.count(ix) for ix in job.targets.values() if target.version_exists(ix))
        return ReindexSummary(
            job_id=job.id,
            status=str(job.status),
            alias=",".join(self.aliases),
            index=",".join(job.targets[a] for a in self.aliases if a in job.targets),
            source_rows=rows,
            indexed=indexed,
            failed=store.dead_letters.count(job.id),
            seconds=round(seconds, 3),
        )
