"""``sparkindex status [--json]``: the latest job of the aliases, and their last verify, printed.

The report is :func:`sparkindex.api.status`'s; without any job it says so in words (and
``"job_id": null`` with a ``message`` in JSON), exit 0: a fresh pipeline is not an error.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from sparkindex.cli.render import err, out


def print_status(body: dict[str, Any]) -> None:
    if body["job_id"] is None:
        err.print(escape(body["message"]))
        return
    out.print(f"job {body['job_id']}  [bold]{body['status']}[/]  {escape(', '.join(body['aliases']))}")
    for k, s in body["entities"].items():
        out.print(
            f"  {escape(k)}: {s['processed']:,}/{s['total']:,} processed, {s['failed']:,} failed, "
            f"partitions {s['partitions']}",
            highlight=False,
        )
    if body["error"]:
        out.print(f"  error: {escape(body['error'])}")
    for alias, v in body["verify"].items():
        out.print(
            f"  last verify of {escape(alias)}: {v['status']} (missing {v['missing']:,}, extra {v['extra']:,}, "
            f"stale {v['stale']:,}, duplicates {v['duplicates']:,})",
            highlight=False,
        )
