"""Running verify (or repair) for a pipeline: open everything, run on Spark, record the result.

The entry point the CLI, the server and sync share. Every run is recorded per alias in the
coordination store (:mod:`sparkindex.coordination.verify_runs`), so the page and ``/metrics`` show
the last check's drift whoever ran it. :func:`run_scheduled_verify` is the ``verify: {every: 24h}``
check: ``serve`` and ``sync`` call it whenever they like; it runs only when the last scheduled
check of an alias is older than ``every``, and only in one process at a time (a lock per
pipeline's aliases in the store; a process that finds it held skips its turn).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.coordination.recovery import holder_is_dead, holder_name
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.verify_runs import COUNTS, VerifyRun
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.planning import resolve_plans, selected_aliases
from sparkindex.errors import LockHeld
from sparkindex.resources import open_source, open_store, open_target, wait_for_read_source
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.ranges import RangeTask, TaskOptions
from sparkindex.verify.repair import repair
from sparkindex.verify.verifier import Runner, Verifier, VerifyProgress, VerifyReport

log = logging.getLogger(__name__)

#: the lock held while a scheduled check runs (not an alias: aliases cannot hold ``:``)
SCHEDULE_LOCK = "verify:{aliases}"


@dataclass
class VerifyOutcome:
    run_id: str
    #: the final pass (after the repair, with ``--repair``)
    reports: list[VerifyReport]
    #: with ``--repair``: the first pass, which found and fixed the drift
    before: list[VerifyReport] | None
    seconds: float

    @property
    def clean(self) -> bool:
        return all(r.clean for r in self.reports)

    @property
    def exit_code(self) -> int:
        return 0 if self.clean else 1

    def to_json(self) -> dict[str, Any]:
        """The contract: the final pass's totals at the top, one report per alias below them."""
        body: dict[str, Any] = {
            **totals(self.reports),
            "clean": self.clean,
            "run_id": self.run_id,
            "seconds": round(self.seconds, 3),
            "aliases": {r.alias: r.to_dict() for r in self.reports},
        }
        if self.before is not None:
            body["repair"] = {
                k: sum((r.repaired or {}).get(k, 0) for r in self.before) for k in ("indexed", "deleted", "failed")
            }
            body["before"] = {**totals(self.before), "aliases": {r.alias: r.to_dict() for r in self.before}}
        return body


def totals(reports: Sequence[VerifyReport]) -> dict[str, int]:
    return {k: sum(getattr(r, k) for r in reports) for k in COUNTS}


def _spark_runner(spark: Callable[[], Any], pipeline: Pipeline, plans: Mapping[str, IndexPlan]) -> Runner:
    def run(tasks: Sequence[RangeTask], options: TaskOptions, done: Callable[[int], None]) -> list[RangeSummary]:
        from sparkindex.verify.spark_tasks import run_verify_tasks

        return run_verify_tasks(spark(), pipeline, tasks, options, plans, done)

    return run


def _start_spark(pipeline: Pipeline) -> Callable[[], Any]:
    """Start the session on a thread (the JVM's start-up overlaps planning); the getter waits."""
    future: Future[Any] = Future()

    def start() -> None:
        from sparkindex.spark.session import REINDEX_CONF, build_session

        try:
            log_path = pipeline.state_dir / "spark.log"
            future.set_result(build_session(pipeline.spark, log_path, register=False, extra=REINDEX_CONF))
        except BaseException as exc:  # noqa: BLE001 - raised again by the getter
            future.set_exception(exc)

    threading.Thread(target=start, name="sparkindex-spark-start", daemon=True).start()
    return future.result


def run_verify(
    pipeline: Pipeline,
    aliases: Sequence[str] | None = None,
    *,
    repair_drift: bool = False,
    spark_factory: Callable[[], Any] | None = None,
    runner: Runner | None = None,
    progress: VerifyProgress | None = None,
    trigger: str = "cli",
    store: CoordinationStore | None = None,
    check_after: bool = True,
) -> VerifyOutcome:
    """Verify (and with *repair_drift*, repair) the pipeline's aliases on Spark; record the result.

    *spark_factory* returns a running session (tests, or a server that has one); without it a
    session is started from the pipeline's ``spark`` section. *runner* replaces Spark entirely.
    """
    started = time.time()
    run_id = str(uuid.uuid4())
    p = pipeline
    chosen = selected_aliases(p, aliases)
    with contextlib.ExitStack() as opened:  # what this call opens it closes; a given store is the caller's
        source = opened.enter_context(open_source(p, bulk_reads=True))
        wait_for_read_source(p, source, "repair" if repair_drift else "verify")
        target = opened.enter_context(open_target(p))
        store = store or opened.enter_context(open_store(p))
        plans = {a: plan for a, (plan, _) in resolve_plans(p, source, chosen, target).items()}
        if runner is None:
            runner = _spark_runner(spark_factory or _start_spark(p), p, plans)
        verifier = Verifier(source, target, plans, runner, p.job, progress)
        try:
            if repair_drift:
                result = repair(verifier, run_id, check_after=check_after)
                outcome = VerifyOutcome(run_id, result.after, result.before, time.time() - started)
            else:
                outcome = VerifyOutcome(run_id, verifier.run(), None, time.time() - started)
        except Exception as exc:
            _record_failure(store, run_id, chosen, trigger, repair_drift, started, exc)
            raise
        if check_after:  # without the second pass, "the last verify" would show drift already fixed
            _record(store, outcome, trigger, started)
        return outcome


def _record(store: CoordinationStore, outcome: VerifyOutcome, trigger: str, started: float) -> None:
    finished = time.time()
    runs = [
        VerifyRun(
            run_id=outcome.run_id,
            alias=r.alias,
            index_name=r.index,
            trigger=trigger,
            repair=outcome.before is not None,
            status="clean" if r.clean else "drift",
            **{k: getattr(r, k) for k in COUNTS},
            started_at=started,
            finished_at=finished,
            report=r.to_dict(),
        )
        for r in outcome.reports
    ]
    try:
        store.verify_runs.record(runs)
    except Exception as exc:  # noqa: BLE001 - the check itself succeeded; say why it is not on the page
        log.warning("could not record verify run %s: %s", outcome.run_id, exc)


def _record_failure(
    store: CoordinationStore,
    run_id: str,
    aliases: Sequence[str],
    trigger: str,
    repair_drift: bool,
    started: float,
    exc: Exception,
) -> None:
    zero: dict[str, Any] = dict.fromkeys(COUNTS, 0)
    runs = [
        VerifyRun(
            run_id,
            a,
            None,
            trigger,
            repair_drift,
            "failed",
            **zero,
            started_at=started,
            finished_at=time.time(),
            error=str(exc)[:2000],
        )
        for a in aliases
    ]
    try:
        store.verify_runs.record(runs)
    except Exception as inner:  # noqa: BLE001 - never hide the original failure
        log.warning("could not record the failed verify run %s: %s", run_id, inner)


# -- the scheduled check -------------------------------------------------------------------------------
def next_verify_at(pipeline: Pipeline, store: CoordinationStore | None = None) -> float | None:
    """When the scheduled check is due next (epoch seconds; now or earlier: due), or None when
    the pipeline schedules none."""
    every = pipeline.verify.every
    if every is None:
        return None
    if store is None:
        with open_store(pipeline) as opened:
            return next_verify_at(pipeline, opened)
    runs = store.verify_runs
    last = [runs.latest(a, trigger="scheduled") for a in selected_aliases(pipeline, None)]
    if any(r is None for r in last):
        return time.time()
    return min(r.finished_at for r in last if r is not None) + every


def run_scheduled_verify(
    pipeline: Pipeline,
    *,
    spark_factory: Callable[[], Any] | None = None,
    runner: Runner | None = None,
    progress: VerifyProgress | None = None,
    force: bool = False,
) -> VerifyOutcome | None:
    """Run the scheduled check if it is due (or *force*) and no other process is running it.

    Returns the outcome (also recorded with trigger ``scheduled``), or None when it was not due,
    is not configured, or another process holds the check's lock.
    """
    with open_store(pipeline) as store:
        return _run_if_due(pipeline, store, spark_factory=spark_factory, runner=runner, progress=progress, force=force)


def _run_if_due(
    pipeline: Pipeline,
    store: CoordinationStore,
    *,
    spark_factory: Callable[[], Any] | None,
    runner: Runner | None,
    progress: VerifyProgress | None,
    force: bool,
) -> VerifyOutcome | None:
    due = next_verify_at(pipeline, store)
    if due is None or (not force and due > time.time()):
        return None
    aliases = selected_aliases(pipeline, None)
    key = SCHEDULE_LOCK.format(aliases=",".join(sorted(aliases)))
    ttl = max(pipeline.job.lock_ttl_s, 3600.0)
    try:
        token = store.locks.acquire(key, holder_name(uuid.uuid4().hex[:12]), ttl, holder_is_dead=holder_is_dead)
    except LockHeld:
        log.info("scheduled verify skipped: another process is running it")
        return None
    try:
        return run_verify(
            pipeline,
            aliases,
            spark_factory=spark_factory,
            runner=runner,
            progress=progress,
            trigger="scheduled",
            store=store,
        )
    finally:
        store.locks.release(key, token)
