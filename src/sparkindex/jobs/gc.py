"""``sparkindex gc --older-than 30d``: forget old jobs, old resolutions, old index versions, and
the transform cache of aliases that are gone.

What goes, of the pipeline's aliases only (several pipelines may share a store): jobs finished
before the cutoff with their partitions (:mod:`coordination.retention` decides which may),
dead-letter resolutions older than the cutoff, verify results older than it (the newest of each
alias stays: it is what the page shows), and index versions beyond ``job.keep_versions``.

The transform cache (``on_change`` outputs, :mod:`coordination.transform_cache`) is forgotten
per alias: that of a pipeline alias whose index no longer exists (no alias, no version), and that
of an alias the pipeline no longer has once its newest entry is older than the cutoff. The age
test is for stores several pipelines share: an alias that is not this pipeline's may be another's,
and one whose outputs are still being written is kept (reported, with the reason). Entries of an
alias a running or resumable job names always stay.

What never goes, and is reported as kept with the reason: a job that is running or that a rerun
would resume, the index an alias points at, and any version an unfinished job is building or
would resume into. Unresolved dead letters stay whatever their age. ``--dry-run`` reports the
same without deleting.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.retention import Kept, Retention, classify_jobs
from sparkindex.coordination.states import FINISHED_JOB_STATES, JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.planning import selected_aliases
from sparkindex.resources import open_store, open_target
from sparkindex.targets.writer import TargetWriter

#: job ids listed in the report at most (the count is always whole)
LISTED = 100


@dataclass
class GcReport:
    older_than_s: float
    cutoff: float
    dry_run: bool
    jobs_deleted: int = 0
    job_ids: list[str] = field(default_factory=list)
    partitions_deleted: int = 0
    dead_letters_deleted: int = 0
    verify_runs_deleted: int = 0
    versions_deleted: list[str] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    transform_cache_deleted: int = 0
    #: the aliases whose transform cache went (each one whole)
    transform_cache_aliases: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def collect_garbage(
    pipeline: Pipeline, older_than_s: float, *, dry_run: bool = False, now: float | None = None
) -> GcReport:
    if older_than_s <= 0:
        raise ValueError("--older-than must be positive")
    now = time.time() if now is None else now
    report = GcReport(older_than_s, now - older_than_s, dry_run)
    with open_store(pipeline) as store, open_target(pipeline) as target:
        aliases = selected_aliases(pipeline, None)
        _jobs(store, pipeline, report, now)
        report.dead_letters_deleted = store.dead_letters.delete_resolved_before(report.cutoff, aliases, dry_run)
        report.verify_runs_deleted = store.verify_runs.delete_before(report.cutoff, aliases, dry_run=dry_run)
        _versions(store, target, pipeline, report)
        _transform_cache(store, target, pipeline, report)
    return report


def _jobs(store: CoordinationStore, pipeline: Pipeline, report: GcReport, now: float) -> None:
    mine = set(selected_aliases(pipeline, None))  # a store may be shared: other pipelines' jobs stay
    jobs = [j for j in store.job_rows.jobs() if set(j.aliases) <= mine]
    doomed, kept = classify_jobs(jobs, report.cutoff, now, pipeline.job.recovery_max_age_s)
    report.kept += kept
    retention = Retention(store)
    if report.dry_run:
        report.jobs_deleted = len(doomed)
        report.partitions_deleted = retention.partition_count([j.id for j in doomed])
        report.job_ids = [j.id for j in doomed[:LISTED]]
        return
    for job in doomed:
        parts = retention.delete_job(job)
        if parts is None:
            report.kept.append(Kept("job", job.id, "changed while gc ran"))
            continue
        report.jobs_deleted += 1
        report.partitions_deleted += parts
        if len(report.job_ids) < LISTED:
            report.job_ids.append(job.id)


def _versions(store: CoordinationStore, target: TargetWriter, pipeline: Pipeline, report: GcReport) -> None:
    """Versions beyond ``keep_versions`` per alias, never the current one or one a job still needs."""
    keep = pipeline.job.keep_versions
    age = pipeline.job.recovery_max_age_s
    building = {ix: job.id for job in store.job_rows.jobs() if _needs_versions(job, age) for ix in job.targets.values()}
    for alias in selected_aliases(pipeline, None):
        current = target.alias_target(alias)
        versions = target.list_versions(alias)
        newest = set(versions[-keep:])
        for index in versions:
            if index == current:
                report.kept.append(Kept("index", index, f"the current index of alias {alias!r}"))
            elif index in building:
                report.kept.append(Kept("index", index, f"job {building[index]} is building or may resume it"))
            elif index in newest:
                continue  # within keep_versions: nothing to report
            else:
                if not report.dry_run:
                    target.delete_version(index)
                    store.ledger.drop_versions(index)  # the version ledger's rows go with their version
                report.versions_deleted.append(index)


def _transform_cache(store: CoordinationStore, target: TargetWriter, pipeline: Pipeline, report: GcReport) -> None:
    """The cache entries of aliases nothing will look them up for again (the module's docstring)."""
    cached = store.transform_cache.aliases()
    if not cached:
        return
    mine = set(selected_aliases(pipeline, None))
    age = pipeline.job.recovery_max_age_s
    needed = {alias: job.id for job in store.job_rows.jobs() if _needs_versions(job, age) for alias in job.aliases}
    for alias, kept in sorted(cached.items()):
        if alias in mine:
            if target.alias_target(alias) is not None or target.list_versions(alias):
                continue  # the alias's cache at work: nothing to report
        elif kept.newest >= report.cutoff:
            reason = "not in this pipeline, but written within --older-than (another pipeline's?)"
            report.kept.append(Kept("transform cache", alias, reason))
            continue
        if alias in needed:
            report.kept.append(Kept("transform cache", alias, f"job {needed[alias]} may still use it"))
            continue
        report.transform_cache_deleted += kept.entries if report.dry_run else store.transform_cache.forget(alias)
        report.transform_cache_aliases.append(alias)


def _needs_versions(job: JobRecord, recovery_max_age_s: float) -> bool:
    """Whether *job* may still write into its versions: it runs, or a rerun would resume it."""
    if job.status in FINISHED_JOB_STATES:
        return False
    if job.status in (JobStatus.FAILED, JobStatus.STOPPED):
        return job.updated_at >= time.time() - recovery_max_age_s
    return True
