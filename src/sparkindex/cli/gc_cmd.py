"""``sparkindex gc --older-than 30d [--dry-run] [--json]``: the command's body and its output."""

from __future__ import annotations

from rich.markup import escape

from sparkindex.cli.render import err
from sparkindex.config.job import parse_span
from sparkindex.config.model import Pipeline
from sparkindex.errors import UsageError
from sparkindex.jobs.gc import GcReport, collect_garbage


def older_than_seconds(text: str) -> float:
    try:
        return parse_span(text)
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None


def gc_body(pipeline: Pipeline, older_than: str, dry_run: bool) -> GcReport:
    report = collect_garbage(pipeline, older_than_seconds(older_than), dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    err.print(
        f"{verb} {report.jobs_deleted:,} jobs ({report.partitions_deleted:,} partitions), "
        f"{report.dead_letters_deleted:,} resolved dead letters, {report.verify_runs_deleted:,} verify results, "
        f"{len(report.versions_deleted):,} index versions"
        + (f": {escape(', '.join(report.versions_deleted))}" if report.versions_deleted else "")
    )
    for kept in report.kept:
        err.print(f"  kept {kept.what} {escape(kept.name)}: {escape(kept.reason)}")
    return report
