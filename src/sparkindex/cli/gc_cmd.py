"""``sparkindex gc --older-than 30d [--dry-run] [--json]``: :func:`sparkindex.api.gc`'s result, printed."""

from __future__ import annotations

from rich.markup import escape

from sparkindex.api import GcResult, UsageError
from sparkindex.cli.render import err


def older_than_seconds(text: str) -> float:
    """``--older-than`` as seconds; a bad span names the option."""
    from sparkindex.config.job import parse_span

    try:
        return parse_span(text)
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None


def print_gc(report: GcResult) -> None:
    verb = "would delete" if report.dry_run else "deleted"
    err.print(
        f"{verb} {report.jobs_deleted:,} jobs ({report.partitions_deleted:,} partitions), "
        f"{report.dead_letters_deleted:,} resolved dead letters, {report.verify_runs_deleted:,} verify results, "
        f"{len(report.versions_deleted):,} index versions"
        + (f": {escape(', '.join(report.versions_deleted))}" if report.versions_deleted else "")
    )
    if report.transform_cache_aliases:
        aliases = escape(", ".join(report.transform_cache_aliases))
        err.print(f"{verb} {report.transform_cache_deleted:,} transform cache entries, of {aliases}")
    for kept in report.kept:
        err.print(f"  kept {kept.what} {escape(kept.name)}: {escape(kept.reason)}")
