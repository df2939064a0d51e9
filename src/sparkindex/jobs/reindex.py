"""A full reindex: lock -> plan or resume -> run on Spark -> finalize -> summary.

The driver never moves documents itself. It decides what work exists (partitions in the store),
runs Spark passes until none is left, and only then, with every partition COMPLETED and its
fencing token still valid, swaps the alias.
"""

from __future__ import annotations

import getpass
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from sparkindex.config.model import Pipeline
from sparkindex.coordination.calculator import EntityPlanInput, plan_partitions
from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.recovery import holder_is_dead, holder_name, recover
from sparkindex.coordination.states import RESUMABLE_JOB_STATES, JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import ConfigError, LockHeld, LockLost, SparkIndexError
from sparkindex.jobs.keeper import LockKeeper
from sparkindex.jobs.planning import resolve_plans, selected_aliases
from sparkindex.jobs.progress import ProgressListener, SilentProgress, StatsPoller
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target

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
    master = pipeline.spark.master
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
        progress: ProgressListener | None = None,
        spark_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.aliases = sorted(selected_aliases(pipeline, aliases))
        self.new = new
        self.progress = progress or SilentProgress()
        self._spark_factory = spark_factory
        self.run_id = uuid.uuid4().hex[:12]
        self.holder = holder_name(self.run_id)

    # -- the whole job -----------------------------------------------------------------------------
    def run(self) -> ReindexSummary:
        started = time.monotonic()
        p = self.pipeline
        check_store_reachable_by_executors(p)
        source = open_source(p.source_url())
        target = open_target(p.target.url, p.base_dir, p.target.options)
        plans = resolve_plans(p, source, self.aliases)
        store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
        tokens = self._lock_all(store)
        keeper = LockKeeper(store, tokens, p.job.lock_ttl_s, p.job.lock_refresh_s)
        keeper.start()
        job: JobRecord | None = None
        try:
            job = self._resume_or_plan(store, source, target, plans)
            for alias, token in tokens.items():
                store.locks.transfer(alias, token, None, job.id)
            store.update_job(job.id, run_id=self.run_id)
            job = store.transition_job(job.id, JobStatus.RUNNING)
            self._run_passes(store, job, keeper)
            job = self._finalize(store, target, job, tokens)
        except BaseException as exc:
            if job is not None:
                self._fail(store, job.id, exc)
            raise
        finally:
            keeper.stop()
            for alias, token in tokens.items():
                store.locks.release(alias, token)
        return self._summary(store, source, target, job, plans, time.monotonic() - started)

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

    def _resume_or_plan(self, store: CoordinationStore, source: Any, target: Any, plans: dict[str, Any]) -> JobRecord:
        p = self.pipeline
        unfinished = store.jobs(self.aliases, [*RESUMABLE_JOB_STATES, JobStatus.INITIALIZING])
        for old in unfinished:
            if self.new:
                if old.status != JobStatus.FAILED:
                    store.reset_orphans(old.id)
                    store.transition_job(old.id, JobStatus.FAILED, error="abandoned by reindex --new")
                continue
            # We hold every alias lock, so whoever ran this job before is gone.
            decision = recover(store, old, holder_alive=False, max_age_s=p.job.recovery_max_age_s)
            current = store.job(old.id)
            if decision.action == "fail" or current.status not in RESUMABLE_JOB_STATES:
                continue
            if not all(target.version_exists(ix) for ix in current.targets.values()):
                store.transition_job(old.id, JobStatus.FAILED, error="its index versions are gone; starting afresh")
                continue
            if current.status in (JobStatus.STOPPED, JobStatus.FAILED):
                store.retry_failed(old.id)
                store.transition_job(old.id, JobStatus.READY)
            self.progress.phase(f"resuming job {old.id}")
            return store.job(old.id)
        self.progress.phase("planning partitions")
        job = store.create_job(self.aliases, {"aliases": self.aliases}, getpass.getuser())
        targets = {alias: target.create_version(alias, mapping) for alias, (_, mapping) in plans.items()}
        store.update_job(job.id, targets=targets)
        specs = plan_partitions(
            source,
            [EntityPlanInput(plan.config, plan.table, plan.id_columns) for plan, _ in plans.values()],
            p.job,
        )
        store.add_partitions(job.id, specs)
        return store.transition_job(job.id, JobStatus.READY)

    # -- running -----------------------------------------------------------------------------------
    def _spark(self) -> Any:
        if self._spark_factory is None:
            from sparkindex.spark.session import build_session

            spark = build_session(self.pipeline.spark)
            self._spark_factory = lambda: spark
        return self._spark_factory()

    def _run_passes(self, store: CoordinationStore, job: JobRecord, keeper: LockKeeper) -> None:
        p = self.pipeline
        poller = StatsPoller(store, job.id, self.progress)
        poller.start()
        try:
            for n in range(p.job.max_passes):
                store.reclaim_stale(job.id, p.job.claim_timeout_s, p.job.partition_retries)
                todo = store.partitions(job.id, [P.PENDING, P.CLOSED])
                if not todo or store.job(job.id).status == JobStatus.STOPPING:
                    break
                if keeper.lost:
                    raise LockLost(keeper.lost)
                self.progress.phase(f"pass {n + 1}: {len(todo)} partitions on Spark")
                spark = self._spark()
                from sparkindex.spark.session import register_data_sources

                register_data_sources(spark)
                wire = orjson.dumps(p.to_wire()).decode()
                try:
                    (
                        spark.read.format("sparkindex_job")
                        .option("pipeline", wire)
                        .option("job_id", job.id)
                        .option("run_id", self.run_id)
                        .load()
                        .write.format("sparkindex")
                        .option("pipeline", wire)
                        .option("job_id", job.id)
                        .mode("append")
                        .save()
                    )
                except Exception as exc:  # noqa: BLE001 - a failed Spark job leaves work for the next pass
                    log.error("Spark pass %d failed: %s", n + 1, str(exc).splitlines()[0][:500])
                    self.progress.phase(f"pass {n + 1} failed; retrying the unfinished partitions")
        finally:
            poller.stop()

    # -- finishing ---------------------------------------------------------------------------------
    def _finalize(self, store: CoordinationStore, target: Any, job: JobRecord, tokens: dict[str, int]) -> JobRecord:
        stats = store.roll_up(job.id)
        job = store.job(job.id)
        if job.status == JobStatus.STOPPING:
            store.reset_orphans(job.id)
            return store.transition_job(job.id, JobStatus.STOPPED, error="stopped by request")
        unfinished = {k: v for k, v in stats.items() if not v.done}
        failed_parts = sum(s.partitions.get(P.FAILED, 0) for s in stats.values())
        if unfinished or failed_parts:
            store.reset_orphans(job.id)
            detail = ", ".join(f"{k}: {v.partitions}" for k, v in stats.items())
            return store.transition_job(
                job.id,
                JobStatus.FAILED,
                error=f"{failed_parts} partition(s) failed or left unfinished ({detail}); rerun to resume",
            )
        self.progress.phase("finalizing: restoring settings, swapping aliases")
        for alias, index in job.targets.items():
            store.locks.check(alias, tokens[alias])
            target.finish_version(index)
            target.swap_alias(alias, index, tokens[alias])
            target.prune_versions(alias, self.pipeline.job.keep_versions)
        failed_docs = store.dead_letters.count(job.id)
        status = JobStatus.COMPLETED_WITH_ERRORS if failed_docs else JobStatus.COMPLETED
        return store.transition_job(job.id, status)

    def _fail(self, store: CoordinationStore, job_id: str, exc: BaseException) -> None:
        try:
            current = store.job(job_id)
            if current.status in (JobStatus.READY, JobStatus.RUNNING, JobStatus.INITIALIZING, JobStatus.STOPPING):
                store.reset_orphans(job_id)
                reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
                store.transition_job(job_id, JobStatus.FAILED, error=reason[:2000])
        except SparkIndexError as inner:
            log.error("could not record the failure of job %s: %s", job_id, inner)

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
