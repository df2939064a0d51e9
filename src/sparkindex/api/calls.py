"""The front door's calls: what the CLI's commands do, as functions a scheduler or notebook calls.

Each takes the pipeline (a path, YAML text or a :class:`~sparkindex.config.model.Pipeline`) and
the aliases (default: all), runs the same preflight checks the CLI runs first (``preflight=False``
skips them), and returns a frozen result with the fields of the command's ``--json``. Bad input
raises :class:`~sparkindex.errors.ConfigError` (the CLI's exit 2; an alias the pipeline does not
define, :class:`~sparkindex.errors.UsageError`); a run that cannot go on raises
:class:`~sparkindex.errors.TransientError` (retry it: a rerun resumes) or
:class:`~sparkindex.errors.PermanentError` (it will fail the same way again).

``spark=`` hands in a running ``SparkSession``; without one, a session is started from the
pipeline's ``spark`` section. Unlike the CLI, these calls install no signal handlers and leave the
process's garbage collector and allocator settings alone; a sync that streams until stopped is
the CLI's job (``sparkindex sync``, which stops cleanly on SIGTERM).
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from sparkindex.api.results import CheckResult, Outcome, ReindexResult, StatusResult, SyncResult, VerifyResult
from sparkindex.config import load_pipeline
from sparkindex.config.loader import parse_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError, UsageError
from sparkindex.jobs.progress import ProgressListener

log = logging.getLogger("sparkindex.api")

#: a pipeline file's path, its YAML text, or a loaded pipeline
PipelineArg = Pipeline | str | os.PathLike[str]


def load(pipeline: PipelineArg) -> Pipeline:
    """*pipeline* as a :class:`Pipeline`: text that spans lines or is one flow mapping (``{...}``)
    is YAML (relative paths in it are taken from the working directory), anything else a path."""
    if isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, str):
        text = pipeline.strip()
        if "\n" in text or text.startswith("{"):
            return parse_pipeline(pipeline, origin="<pipeline text>", base_dir=Path.cwd())
        return load_pipeline(Path(text))
    return load_pipeline(Path(pipeline))


def _factory(spark: Any) -> Callable[[], Any] | None:
    return None if spark is None else (lambda: spark)


def _guard(pipeline: Pipeline, scope: Literal["reindex", "sync"], aliases: Sequence[str] | None, **kw: Any) -> None:
    """The CLI's preflight for this run; what it prints goes to the log (a FAIL raises ConfigError)."""
    from sparkindex.preflight import guard

    lines = io.StringIO()
    try:
        guard(pipeline, scope, aliases, lines, **kw)
    except ConfigError as exc:  # the failed checks are the message: a caller may not see the log
        raise ConfigError(f"{exc}\n{lines.getvalue().rstrip()}") from None
    for line in lines.getvalue().splitlines():
        log.warning("preflight: %s", line)


def reindex(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    spark: Any = None,
    progress: ProgressListener | None = None,
    new: bool = False,
    adopt: bool = False,
    preflight: bool = True,
) -> ReindexResult:
    """Rebuild the aliases into new versions and swap them (``sparkindex reindex``); an unfinished
    job of the same plan is resumed unless *new*."""
    from sparkindex.jobs.reindex import ReindexJob

    p = load(pipeline)
    if preflight:
        _guard(p, "reindex", aliases, adopt=adopt)
    job = ReindexJob(p, aliases, new=new, adopt=adopt, progress=progress, spark_factory=_factory(spark))
    s = job.run()
    outcome = Outcome.STOPPED if s.status == "STOPPED" else Outcome.of_exit_code(s.exit_code)
    return ReindexResult(
        outcome,
        s.job_id,
        s.status,
        s.alias,
        s.index,
        s.source_rows,
        s.indexed,
        s.failed,
        s.seconds,
    )


def sync(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    spark: Any = None,
    group: str | None = None,
    until_caught_up: bool = True,
    on_gap: Literal["reconcile", "fail"] | None = None,
    preflight: bool = True,
) -> SyncResult:
    """Apply what changed in the source (``sparkindex sync``). By default what was committed by
    the start, then return (``until_caught_up=False`` streams until the process stops it)."""
    from sparkindex.capture.sync.run import SyncRun

    if on_gap not in (None, "reconcile", "fail"):
        raise UsageError(f"on_gap: expected 'reconcile' or 'fail', got {on_gap!r}")
    p = load(pipeline)
    if preflight:
        _guard(p, "sync", aliases)
    run = SyncRun(
        p, aliases, group=group, until_caught_up=until_caught_up, on_gap=on_gap, spark_factory=_factory(spark)
    )
    s = run.run()
    return SyncResult(
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
    )


def _verify(pipeline: PipelineArg, aliases: Sequence[str] | None, spark: Any, repair: bool) -> VerifyResult:
    from sparkindex.verify.run import run_verify

    outcome = run_verify(load(pipeline), aliases, repair_drift=repair, spark_factory=_factory(spark))
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


def verify(pipeline: PipelineArg, aliases: Sequence[str] | None = None, *, spark: Any = None) -> VerifyResult:
    """Compare the index with the source (``sparkindex verify``): missing, extra, stale, duplicates."""
    return _verify(pipeline, aliases, spark, repair=False)


def repair(pipeline: PipelineArg, aliases: Sequence[str] | None = None, *, spark: Any = None) -> VerifyResult:
    """Verify, rebuild what differs, and verify again (``sparkindex verify --repair``)."""
    return _verify(pipeline, aliases, spark, repair=True)


def check(pipeline: PipelineArg, aliases: Sequence[str] | None = None) -> CheckResult:
    """Every preflight check (``sparkindex check``), none of which changes anything for good."""
    from sparkindex.preflight import Options, exit_code, report, run_checks

    checks = run_checks(load(pipeline), Options(aliases=aliases))
    body = report(checks)
    code = exit_code(checks)
    outcome = Outcome.DONE if code == 0 else Outcome.DONE_WITH_ERRORS if code == 1 else Outcome.FAILED
    return CheckResult(outcome, bool(body["ok"]), tuple(body["checks"]), code)


def status(pipeline: PipelineArg, aliases: Sequence[str] | None = None) -> StatusResult:
    """The aliases' latest reindex job and their last verify (``sparkindex status``)."""
    from sparkindex.jobs.status import status_report

    body = status_report(load(pipeline), aliases)
    return StatusResult(body["job_id"], body["status"], tuple(body["aliases"]), body)
