"""Terminal output: a Rich progress bar per entity, errors on stderr, JSON on stdout's last line."""

from __future__ import annotations

from typing import Any

from rich.console import Console
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

from sparkindex.config.secrets import redact_url
from sparkindex.coordination.records import EntityStats

# soft_wrap: a piped stderr (logs, CI) must get each message on one line, never re-wrapped at 80
# columns, where a space in a quoted user value would read as a newline.
err = Console(stderr=True, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    # Messages quote user input (patterns like ``^[a-z0-9]*$``, bracketed names): never markup.
    err.print(f"[bold red]error:[/] {escape(redact_url(message))}", highlight=False, markup=True)


class DocsPerSecondColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("   - docs/s" if speed is None else f"{speed:>7,.0f} docs/s", style="cyan")


class RichProgress:
    """Implements the job's ProgressListener with one bar per entity (alias)."""

    def __init__(self, enabled: bool = True) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            DocsPerSecondColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[parts]}"),
            console=err,
            disable=not enabled,
            speed_estimate_period=10,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def phase(self, text: str) -> None:
        self.progress.console.print(f"[dim]·[/] {escape(text)}")

    def stats(self, stats: dict[str, EntityStats]) -> None:
        for entity, s in stats.items():
            parts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(s.partitions.items()))
            if entity not in self.tasks:
                self.tasks[entity] = self.progress.add_task(escape(entity), total=max(s.total, 1), parts=parts)
            self.progress.update(
                self.tasks[entity], completed=s.processed, total=max(s.total, s.processed, 1), parts=parts
            )
