"""``sparkindex verify [--repair] [--json]``: the command's body and its terminal output.

Exit code 0 when the (final) pass is clean, 1 when drift is left; the JSON object on stdout's
last line is :meth:`VerifyOutcome.to_json` (the contract's keys at the top).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape

from sparkindex.cli.bars import RangeBars
from sparkindex.cli.render import err
from sparkindex.config.model import Pipeline
from sparkindex.verify.run import VerifyOutcome, run_verify
from sparkindex.verify.verifier import VerifyReport


def report_line(r: VerifyReport, prefix: str = "") -> str:
    colour = "green" if r.clean else "red"
    return (
        f"{prefix}[{colour}]{escape(r.alias)}[/] ({escape(str(r.index))}): checked {r.checked:,}, "
        f"missing {r.missing:,}, extra {r.extra:,}, stale {r.stale:,}, duplicates {r.duplicates:,} "
        f"(index holds {r.index_docs:,}; {r.unbuildable:,} rows could not be built)"
    )


def print_outcome(outcome: VerifyOutcome) -> None:
    if outcome.before is not None:
        for r in outcome.before:
            err.print(report_line(r, "found:    "))
            fixed = r.repaired or {}
            err.print(
                f"repaired: {escape(r.alias)}: {fixed.get('indexed', 0):,} indexed, {fixed.get('deleted', 0):,} "
                f"deleted, {fixed.get('failed', 0):,} rejected (dead-lettered)"
            )
    for r in outcome.reports:
        err.print(report_line(r, "after:    " if outcome.before is not None else ""))
        for note in r.notes:
            err.print(f"  [yellow]note:[/] {escape(note)}")
        for kind, ids in r.samples.items():
            if ids:
                err.print(f"  {kind}: {escape(', '.join(ids[:5]))}{' …' if len(ids) > 5 else ''}", highlight=False)


def verify_command(pipeline: Pipeline, aliases: Sequence[str] | None, repair: bool) -> VerifyOutcome:
    with RangeBars() as bars:
        outcome = run_verify(pipeline, aliases, repair_drift=repair, progress=bars)
    print_outcome(outcome)
    return outcome
