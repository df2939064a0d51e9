"""``sparkindex dlq list|redrive``: the dead letters, and retrying them from the source.

``redrive`` exits 0 when every letter it tried was resolved (indexed, or deleted because its row
is gone), 1 when some still fail (they keep their attempts, one more each) or could not be tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape

from sparkindex.cli.bars import CountBar
from sparkindex.cli.render import err, out
from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.planning import selected_aliases
from sparkindex.jobs.redrive import RedriveReport, redrive


def dlq_list_body(
    pipeline: Pipeline, aliases: Sequence[str] | None, error_class: str | None, limit: int, as_json: bool
) -> dict[str, Any] | None:
    """The letters (newest first); printed as lines, or returned as the JSON body."""
    store = CoordinationStore(pipeline.coordination_url(), pipeline.coordination.prefix)
    try:
        items = [
            d
            for a in selected_aliases(pipeline, aliases)
            for d in store.dead_letters.list(alias=a, limit=limit, error_class=error_class)
        ]
    finally:
        store.close()
    if as_json:
        return {"dead_letters": [d.__dict__ for d in items], "count": len(items)}
    for d in items:
        out.print(
            f"{d.alias}  {d.doc_id}  {d.error_class}: {d.error_message[:120]}  (attempts {d.attempts})",
            markup=False,
        )
    if not items:
        err.print("no dead letters" + (f" of class {escape(error_class)}" if error_class else ""))
    return None


def dlq_redrive_body(pipeline: Pipeline, aliases: Sequence[str] | None, error_class: str | None) -> RedriveReport:
    with CountBar("re-driving dead letters", "letters") as bar:
        report = redrive(pipeline, aliases, error_class, on_progress=bar.update)
    if report.attempted == 0 and report.skipped == 0:
        err.print("no dead letters to re-drive" + (f" of class {escape(error_class)}" if error_class else ""))
    else:
        colour = "green" if report.exit_code == 0 else "yellow"
        err.print(
            f"[{colour}]re-drove {report.attempted:,}[/]: {report.succeeded:,} indexed, {report.gone:,} gone from "
            f"the source (deleted from the index), {report.failed:,} still failing"
        )
    for letter in report.still_failing[:10]:
        err.print(
            f"  {escape(letter['doc_id'])}: {escape(letter['error_class'])}: {escape(letter['error'][:160])} "
            f"(attempts {letter['attempts']})"
        )
    for note in report.notes:
        err.print(f"  [yellow]note:[/] {escape(note)}")
    return report
