"""The CLI's :class:`~sparkindex.api.Progress`: a Rich bar per tally on stderr (stdout keeps the
JSON line clean), and each phase as a dim line above them.

One implementation for every command: a reindex shows a bar per entity counting documents
(with its partition states), verify one per pass counting key ranges, a re-drive one counting
dead letters, a sync one per consumer group counting changes (no total: it streams). The bars
start with the call and stop when it ends, however it ends, so the terminal is never left with
a live display under an error message.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from sparkindex.api import CallName, Outcome, Tally
from sparkindex.cli.render import err

#: a unit as the rate column abbreviates it
SHORT_UNITS = {"documents": "docs"}


class RateColumn(ProgressColumn):
    """Items per second in the tally's own unit (docs/s, ranges/s, letters/s, changes/s)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        unit = SHORT_UNITS.get(task.fields["unit"], task.fields["unit"])
        return Text(f"   - {unit}/s" if speed is None else f"{speed:>7,.0f} {unit}/s", style="cyan")


class RichBars:
    """Implements :class:`sparkindex.api.Progress`; *enabled* False draws nothing (phases still print)."""

    def __init__(self, enabled: bool = True) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            RateColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[detail]}"),
            console=err,
            disable=not enabled,
            speed_estimate_period=10,
        )
        self.tasks: dict[str, TaskID] = {}

    def started(self, call: CallName, aliases: Sequence[str]) -> None:
        self.progress.start()

    def phase(self, text: str) -> None:
        self.progress.console.print(f"[dim]·[/] {escape(text)}", highlight=False)

    def advanced(self, tally: Tally) -> None:
        total = None if tally.total is None else max(tally.total, tally.done, 1)
        detail = escape(tally.detail)
        if tally.task not in self.tasks:
            self.tasks[tally.task] = self.progress.add_task(
                escape(tally.task), total=total, unit=tally.unit, detail=detail
            )
        self.progress.update(self.tasks[tally.task], completed=tally.done, total=total, detail=detail)

    def finished(self, outcome: Outcome) -> None:
        self.progress.stop()
