"""The calls that run a job: reindex, sync, verify, repair, the scheduled verify; and the two that
look before one runs: check and status.

Each takes the pipeline (a path, YAML text or a :class:`~sparkindex.config.model.Pipeline`) and
the aliases (default: all), runs the same preflight checks the CLI runs first (``preflight=False``
skips them), and returns a frozen result with the fields of the command's ``--json``. Bad input
raises :class:`~sparkindex.errors.ConfigError` (the CLI's exit 2; an alias the pipeline does not
define, :class:`~sparkindex.errors.UsageError`); a run that cannot go on raises
:class:`~sparkindex.errors.TransientError` (retry it: a rerun resumes) or
:class:`~sparkindex.errors.PermanentError` (it will fail the same way again).

``spark=`` hands in a running ``SparkSession`` (see :mod:`.session` for what is borrowed and put
back); without one, a session is started from the pipeline's ``spark`` section. ``progress=``
takes a :class:`~sparkindex.api.progress.Progress`. None of these calls installs a signal handler
or retunes the process (garbage collector, allocator): that is the CLI's, done explicitly.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from sparkindex.api.loading import PipelineArg, aliases_of, is_text, load
from sparkindex.api.loading import preflight as _preflight
from sparkindex.api.progress import Progress, Tally, watching
from sparkindex.api.results import CheckResult, Outcome, ReindexResult, StatusResult, SyncResult, VerifyResult
from sparkindex.api.session import borrowed
from sparkindex.api.sync_monitor import SyncMonitor
from sparkindex.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from sparkindex.verify.run import VerifyOutcome

__all__ = [
    "StopToken",
    "check",
    "reindex",
    "repair",
    "scheduled_verify",
    "status",
    "sync",
    "verify",
    "verify_due_at",
]


def reindex(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    spark: Any = None,
    progress: Progress | None = None,
    new: bool = False,
    adopt: bool = False,
    preflight: bool = True,
) -> ReindexResult:
    """Rebuild the aliases into new versions and swap them (``sparkindex reindex``); an unfinished
    job of the same plan is resumed unless *new*. *adopt*: an index that bears an alias's name is
    replaced at the swap."""
    from sparkindex.jobs.reindex import ReindexJob

    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with watching(progress, "reindex", chosen) as watch:
        if preflight:
            _preflight(p, "reindex", aliases, watch, adopt=adopt, spark=spark)
        with borrowed(p, spark) as factory:
            job = ReindexJob(p, aliases, new=new, adopt=adopt, progress=watch.reindex_listener(), spark_factory=factory)
            s = job.run()
        outcome = Outcome.STOPPED if s.status == "STOPPED" else Outcome.of_exit_code(s.exit_code)
        return watch.done(
            ReindexResult(outcome, s.job_id, s.status, s.alias, s.index, s.source_rows, s.indexed, s.failed, s.seconds)
        )


class StopToken:
    """Asks a running :func:`sync` to stop cleanly, from any thread or a signal handler: the batch
    in flight finishes and is acknowledged (or is left unacknowledged), the lock is released, and
    the call returns its summary. Set before the sync starts, it stops at its first chance."""

    def __init__(self, *, signals: bool = False) -> None:
        #: set from a SIGTERM handler of the caller's own: ``sparkindex stop`` may then signal this
        #: process (without one it only takes the sync's lock over, which stops it within seconds)
        self.signals = signals
        self._event = threading.Event()
        self._stops: list[Callable[[], None]] = []

    def set(self) -> None:
        """Stop the sync. Called from a signal handler, it runs between two bytecodes of the main
        thread; ``threading.Event.set`` is safe there in CPython because the Event's condition
        lock is only ever held briefly by ``wait``'s own bookkeeping, never across a blocking call."""
        self._event.set()
        for stop in list(self._stops):
            stop()

    def is_set(self) -> bool:
        return self._event.is_set()

    def _attach(self, stop: Callable[[], None]) -> None:
        self._stops.append(stop)
        if self._event.is_set():
            stop()

    def _detach(self, stop: Callable[[], None]) -> None:
        self._stops.remove(stop)


def sync(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    spark: Any = None,
    progress: Progress | None = None,
    group: str | None = None,
    until_caught_up: bool = True,
    on_gap: Literal["reconcile", "fail"] | None = None,
    stop: StopToken | None = None,
    preflight: bool = True,
    monitor: SyncMonitor | None = None,
) -> SyncResult:
    """Apply what changed in the source (``sparkindex sync``). By default what was committed by
    the start, then return; ``until_caught_up=False`` streams until *stop* is set (or, without
    one, until the process ends). Progress: one tally per acknowledged batch, counting changes.
    *monitor*: a :class:`~sparkindex.api.SyncMonitor` that reports the run's health to other threads
    while it runs (``sync --metrics-port`` serves it)."""
    from sparkindex.capture.sync.run import SyncRun

    if on_gap not in (None, "reconcile", "fail"):
        raise UsageError(f"on_gap: expected 'reconcile' or 'fail', got {on_gap!r}")
    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with watching(progress, "sync", chosen) as watch:
        if preflight:
            _preflight(p, "sync", aliases, watch, spark=spark)
        with borrowed(p, spark) as factory:
            run = SyncRun(
                p,
                aliases,
                group=group,
                until_caught_up=until_caught_up,
                on_gap=on_gap,
                spark_factory=factory,
                stops_on_sigterm=stop is not None and stop.signals,
            )
            task = f"sync {run.group}"

            def acknowledged(position: int) -> None:
                t = run.totals
                detail = f"{t.batches:,} batches, position {position}"
                watch.advanced(Tally(task, "changes", t.applied + t.deleted, None, t.failed, detail))

            run.on_ack = acknowledged
            if stop is not None:
                stop._attach(run.stop)
            if monitor is not None:
                monitor._attach(run.group, run.health)
            try:
                s = run.run()
            finally:
                if monitor is not None:
                    monitor._detach()
                if stop is not None:
                    stop._detach(run.stop)
        return watch.done(
            SyncResult(
                Outcome.DONE_WITH_ERRORS if s.failed else Outcome.DONE,
                s.applied,
                s.deleted,
                s.position,
                s.lag_s,
                s.failed,
                s.batches,
                s.group,
                s.lag_bytes,
                dict(s.reconciled),
                tuple(run.aliases),
            )
        )


def verify_result(outcome: VerifyOutcome) -> VerifyResult:
    """A :class:`~sparkindex.verify.run.VerifyOutcome` as the front door's result."""
    body = outcome.to_json()
    return VerifyResult(
        Outcome.of_exit_code(outcome.exit_code),
        body["missing"],
        body["extra"],
        body["stale"],
        body["duplicates"],
        body["index_docs"],
        body["checked"],
        body["clean"],
        body["run_id"],
        body["seconds"],
        body,
    )


def _verify(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None,
    spark: Any,
    progress: Progress | None,
    repair: bool,
    preflight: bool,
) -> VerifyResult:
    from sparkindex.verify.run import run_verify

    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with watching(progress, "repair" if repair else "verify", chosen) as watch:
        if preflight:  # what a reindex needs: source, store, target and Spark
            _preflight(p, "documents", aliases, watch, spark=spark)
        with borrowed(p, spark) as factory:
            outcome = run_verify(
                p, aliases, repair_drift=repair, spark_factory=factory, progress=watch.verify_listener()
            )
        return watch.done(verify_result(outcome))


def verify(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    spark: Any = None,
    progress: Progress | None = None,
    preflight: bool = True,
) -> VerifyResult:
    """Compare the index with the source (``sparkindex verify``): missing, extra, stale, duplicates.
    Progress: one tally per pass, counting key ranges."""
    return _verify(pipeline, aliases, spark, progress, repair=False, preflight=preflight)


def repair(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    spark: Any = None,
    progress: Progress | None = None,
    preflight: bool = True,
) -> VerifyResult:
    """Verify, rebuild what differs, and verify again (``sparkindex verify --repair``)."""
    return _verify(pipeline, aliases, spark, progress, repair=True, preflight=preflight)


def verify_due_at(pipeline: PipelineArg) -> float | None:
    """When the scheduled verify (``verify: {every: ...}``) is due next, in epoch seconds (now or
    earlier: due), or None when the pipeline schedules none."""
    from sparkindex.verify.run import next_verify_at

    return next_verify_at(load(pipeline))


def scheduled_verify(
    pipeline: PipelineArg,
    *,
    spark: Any = None,
    progress: Progress | None = None,
    force: bool = False,
    preflight: bool = True,
) -> VerifyResult | None:
    """The scheduled verify, when it is due (or *force*) and no other process runs it (a lock in
    the store): recorded as ``scheduled``, which is what "due" counts. None when it did not run."""
    from sparkindex.verify.run import run_scheduled_verify

    p = load(pipeline)
    due = verify_due_at(p)
    if due is None or (not force and due > time.time()):
        return None
    with watching(progress, "scheduled_verify", aliases_of(p, None)) as watch:
        if preflight:
            _preflight(p, "documents", None, watch, spark=spark)
        with borrowed(p, spark) as factory:
            outcome = run_scheduled_verify(p, spark_factory=factory, progress=watch.verify_listener(), force=force)
        if outcome is None:  # another process took the turn meanwhile
            return None
        return watch.done(verify_result(outcome))


def check(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    min_free_disk_bytes: int = 1 << 30,
    min_binlog_retention_s: float = 7 * 86400.0,
    state_dir: str | os.PathLike[str] | None = None,
) -> CheckResult:
    """Every preflight check (``sparkindex check``), none of which changes anything for good.

    A pipeline that does not load, or an alias it does not define, is a FAIL check of its own
    (``config``, ``index``), not an exception: the result has one shape whatever is wrong.
    *state_dir* is :func:`load`'s."""
    from sparkindex.preflight import Options, exit_code, report, run_checks
    from sparkindex.preflight.model import fail

    options = Options(
        aliases=aliases, min_free_disk_bytes=min_free_disk_bytes, min_binlog_retention_s=min_binlog_retention_s
    )
    try:
        p = load(pipeline, state_dir)
    except ConfigError as exc:
        where = "the pipeline text" if is_text(pipeline) else str(pipeline)
        checks = [fail("config", str(exc), f"correct {where} where the message says")]
    else:
        try:
            checks = run_checks(p, options)
        except UsageError as exc:
            checks = [fail("index", str(exc), "name aliases the pipeline defines")]
    body = report(checks)
    code = exit_code(checks)
    outcome = Outcome.DONE if code == 0 else Outcome.DONE_WITH_ERRORS if code == 1 else Outcome.FAILED
    return CheckResult(outcome, bool(body["ok"]), tuple(body["checks"]), code, tuple(c.line() for c in checks))


def status(pipeline: PipelineArg, aliases: Sequence[str] | None = None) -> StatusResult:
    """The aliases' latest reindex job and their last verify (``sparkindex status``)."""
    from sparkindex.jobs.status import status_report

    body = status_report(load(pipeline), aliases)
    return StatusResult(body["job_id"], body["status"], tuple(body["aliases"]), body)
