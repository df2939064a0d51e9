"""The calls around the jobs: dead letters (list, re-drive), gc, stop, search, a new pipeline
(init), and a consumer group's slot and deferred changes.

Which run a preflight by default, and why: those that build documents from the source (re-drive,
applying deferred changes) run the checks of the run they resemble. Those that read or administer
the store and the target (list, gc, stop, search, dropping a slot) run none: they are what a
person reaches for while something is broken, and a refusal there would leave them nothing.
``init`` has no pipeline yet to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkindex.api.loading import PipelineArg, aliases_of, load
from sparkindex.api.loading import preflight as _preflight
from sparkindex.api.progress import Progress, watching
from sparkindex.api.results import (
    DeadLettersResult,
    DeferredResult,
    DropSlotResult,
    GcResult,
    InitResult,
    Outcome,
    RedriveResult,
    SearchResult,
    StopResult,
)
from sparkindex.api.session import borrowed
from sparkindex.errors import UsageError

__all__ = ["apply_deferred", "dead_letters", "drop_slot", "gc", "init", "redrive", "search", "stop"]


def dead_letters(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    error_class: str | None = None,
    limit: int = 100,
) -> DeadLettersResult:
    """The dead letters of the aliases (``dlq list``), newest first, at most *limit* per alias."""
    from sparkindex.resources import open_store

    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with open_store(p) as store:
        letters = [d for a in chosen for d in store.dead_letters.list(alias=a, limit=limit, error_class=error_class)]
    return DeadLettersResult(tuple(letters))


def redrive(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    error_class: str | None = None,
    progress: Progress | None = None,
    preflight: bool = True,
) -> RedriveResult:
    """Rebuild the dead-lettered documents from the source by key and write them again
    (``dlq redrive``), in this process. Progress: one tally counting letters."""
    from sparkindex.jobs.redrive import redrive as run_redrive

    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with watching(progress, "redrive", chosen) as watch:
        if preflight:  # a re-drive builds documents as a reindex does, in the driver
            _preflight(p, "documents", aliases, watch)
        r = run_redrive(p, aliases, error_class, on_progress=watch.counter("dead letters", "letters"))
        return watch.done(
            RedriveResult(
                Outcome.DONE if r.exit_code == 0 else Outcome.DONE_WITH_ERRORS,
                r.run_id,
                r.alias,
                r.error_class,
                r.attempted,
                r.succeeded,
                r.gone,
                r.failed,
                r.skipped,
                tuple(r.still_failing),
                tuple(r.notes),
                r.seconds,
            )
        )


def gc(pipeline: PipelineArg, *, older_than: float | str = "30d", dry_run: bool = False) -> GcResult:
    """Forget finished jobs, resolved dead letters and verify results older than *older_than*
    (seconds, or a span: ``30d``, ``12h``, ``90m``), index versions beyond ``keep_versions``, and
    the transform cache of aliases that are gone (``sparkindex gc``); *dry_run* reports the same
    and deletes nothing."""
    from sparkindex.config.job import parse_span
    from sparkindex.jobs.gc import collect_garbage

    try:
        seconds = parse_span(older_than)
    except ValueError as exc:
        raise UsageError(f"older_than: {exc}") from None
    r = collect_garbage(load(pipeline), seconds, dry_run=dry_run)
    return GcResult(
        r.older_than_s,
        r.cutoff,
        r.dry_run,
        r.jobs_deleted,
        tuple(r.job_ids),
        r.partitions_deleted,
        r.dead_letters_deleted,
        r.verify_runs_deleted,
        tuple(r.versions_deleted),
        tuple(r.kept),
        r.transform_cache_deleted,
        tuple(r.transform_cache_aliases),
    )


def stop(pipeline: PipelineArg, aliases: Sequence[str] | None = None) -> StopResult:
    """Ask what runs to stop gracefully (``sparkindex stop``): the pipeline's sync when one runs
    (it stops after its batch in flight), else the aliases' running reindex job (its tasks hand
    their partitions back; a later reindex resumes it). Nothing running raises UsageError."""
    from sparkindex.capture.control import request_sync_stop
    from sparkindex.jobs.control import request_stop
    from sparkindex.resources import open_store

    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with open_store(p) as store:
        holder = request_sync_stop(store, p)
        if holder is not None:
            return StopResult("sync", holder, "stopping")
        job = request_stop(store, chosen)
        return StopResult("reindex", job.id, str(job.status))


def search(pipeline: PipelineArg, alias: str, query: str, limit: int = 10) -> SearchResult:
    """Search an alias (or an index) of the pipeline's target (``sparkindex search``)."""
    from sparkindex.resources import open_target

    with open_target(load(pipeline)) as target:
        return SearchResult(tuple(target.search(alias, query, limit)))


def init(
    source: str,
    tables: Sequence[str] | None = None,
    *,
    target: str | None = None,
    depth: int = 3,
    output: str | Path = "pipeline.yaml",
    where: str | None = None,
) -> InitResult:
    """A pipeline for the database at *source*, from its schema (``sparkindex init``): the text a
    reindex runs as it is. Nothing is written: where the file goes, and whether an existing one
    may be replaced, is the caller's (*output* only places the paths the text names). *where*:
    a row filter (SQL) for the one index *tables* names (or the only one chosen), tried on the
    database first (``init --where``; a refusal is a :class:`UsageError`)."""
    from sparkindex.scaffold import InitOptions, scaffold

    chosen = None if tables is None else list(tables)
    r = scaffold(InitOptions(source, Path(output), chosen, target, depth, where))
    return InitResult(r.text, tuple(r.aliases), dict(r.left_out), r.capture, tuple(r.variables), tuple(r.unreached))


def drop_slot(pipeline: PipelineArg, group: str | None = None) -> DropSlotResult:
    """Remove a consumer group's replication slot and offsets (``sync --drop-slot``): a slot that
    nobody reads retains the server's log without bound. A later sync of the group starts then."""
    from sparkindex.capture.control import drop_consumer

    p = load(pipeline)
    name = group or p.sync.group
    return DropSlotResult(name, drop_consumer(p, name))


def apply_deferred(
    pipeline: PipelineArg,
    aliases: Sequence[str] | None = None,
    *,
    group: str | None = None,
    spark: Any = None,
    progress: Progress | None = None,
    preflight: bool = True,
) -> DeferredResult:
    """Apply the recorded deferred changes now (``sync --apply-deferred``) rather than at the
    daily refresh; on Spark."""
    from sparkindex.capture.sync.deferred import apply_deferred as run_deferred

    p = load(pipeline)
    chosen = aliases_of(p, aliases)
    with watching(progress, "apply_deferred", chosen) as watch:
        if preflight:
            _preflight(p, "documents", aliases, watch, spark=spark)
        with borrowed(p, spark) as factory:
            t = run_deferred(p, aliases, group=group, spark=None if factory is None else factory())
        return watch.done(
            DeferredResult(
                Outcome.DONE_WITH_ERRORS if t["failed"] else Outcome.DONE,
                t["records"],
                t["documents"],
                t["applied"],
                t["deleted"],
                t["failed"],
            )
        )
