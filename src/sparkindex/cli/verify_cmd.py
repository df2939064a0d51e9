"""``sparkindex verify [--repair] [--json]``: the report of :func:`sparkindex.api.verify` (or
``repair``), printed.

Exit code 0 when the (final) pass is clean, 1 when drift is left; the JSON object on stdout's
last line is the result's ``report`` (the contract's keys at the top).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from sparkindex.cli.render import err


def report_line(r: dict[str, Any], prefix: str = "") -> str:
    clean = r["missing"] == r["extra"] == r["stale"] == r["duplicates"] == 0
    colour = "green" if clean else "red"
    return (
        f"{prefix}[{colour}]{escape(r['alias'])}[/] ({escape(str(r['index']))}): checked {r['checked']:,}, "
        f"missing {r['missing']:,}, extra {r['extra']:,}, stale {r['stale']:,}, duplicates {r['duplicates']:,} "
        f"(index holds {r['index_docs']:,}; {r['unbuildable']:,} rows could not be built)"
    )


def path_line(r: dict[str, Any]) -> str:
    """How the alias was compared: by range checksums (and how many ranges matched), or
    document by document, and why."""
    ranges = r.get("ranges") or {}
    if r.get("path") == "checksums":
        return (
            f"compared by checksum: {ranges.get('matched', 0):,} of {ranges.get('compared', 0):,} ranges matched, "
            f"{ranges.get('descended', 0):,} differed and were compared key by key"
        )
    return f"compared document by document: {r.get('path_reason') or 'no checksums'}"


def print_report(report: dict[str, Any]) -> None:
    """Per alias: what the first pass found and repaired (with ``--repair``), then the final pass."""
    before = report.get("before")
    if before is not None:
        for r in before["aliases"].values():
            err.print(report_line(r, "found:    "))
            fixed = r.get("repaired") or {}
            err.print(
                f"repaired: {escape(r['alias'])}: {fixed.get('indexed', 0):,} indexed, {fixed.get('deleted', 0):,} "
                f"deleted, {fixed.get('failed', 0):,} rejected (dead-lettered)"
            )
    for r in report["aliases"].values():
        err.print(report_line(r, "after:    " if before is not None else ""))
        err.print(f"  {escape(path_line(r))}", highlight=False)
        for note in r["notes"]:
            err.print(f"  [yellow]note:[/] {escape(note)}")
        for kind, ids in r["samples"].items():
            if ids:
                err.print(f"  {kind}: {escape(', '.join(ids[:5]))}{' …' if len(ids) > 5 else ''}", highlight=False)
