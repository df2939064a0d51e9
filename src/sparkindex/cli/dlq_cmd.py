"""``sparkindex dlq list|redrive``: :func:`sparkindex.api.dead_letters` and
:func:`sparkindex.api.redrive`'s results, printed.

``redrive`` exits 0 when every letter it tried was resolved (indexed, or deleted because its row
is gone), 1 when some still fail (they keep their attempts, one more each) or could not be tried.
"""

from __future__ import annotations

from rich.markup import escape

from sparkindex.api import DeadLettersResult, RedriveResult
from sparkindex.cli.render import err, out


def _of_class(error_class: str | None) -> str:
    return f" of class {escape(error_class)}" if error_class else ""


def print_letters(result: DeadLettersResult, error_class: str | None) -> None:
    for d in result.letters:
        out.print(
            f"{d.alias}  {d.doc_id}  {d.error_class}: {d.error_message[:120]}  (attempts {d.attempts})",
            markup=False,
        )
    if not result.letters:
        err.print("no dead letters" + _of_class(error_class))


def print_redrive(report: RedriveResult) -> None:
    if report.attempted == 0 and report.skipped == 0:
        err.print("no dead letters to re-drive" + _of_class(report.error_class))
    else:
        colour = "green" if report.outcome.exit_code == 0 else "yellow"
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
