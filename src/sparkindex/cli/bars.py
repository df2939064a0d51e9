"""Progress bars for verify, repair and re-drive, on stderr (stdout keeps the JSON line clean).

Verify's unit is a key range (Spark reports tasks, not documents); re-drive's is a dead letter.
"""

from __future__ import annotations

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from sparkindex.cli.render import RichProgress, err


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
        console=err,
        disable=not enabled,
    )


class RangeBars(RichProgress):
    """A :class:`~sparkindex.verify.verifier.VerifyProgress`: one bar per pass over key ranges
    (the reindex's bars, started, stopped and narrated alike, with other columns)."""

    def __init__(self, enabled: bool = True) -> None:
        self.progress = _progress(enabled)
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> RangeBars:
        super().__enter__()
        return self

    def ranges(self, label: str, done: int, total: int) -> None:
        if label not in self.tasks:
            self.tasks[label] = self.progress.add_task(escape(label), total=max(total, 1), unit="ranges")
        self.progress.update(self.tasks[label], completed=done, total=max(total, 1))


class CountBar(RichProgress):
    """One bar counting items (dead letters) as they are handled."""

    def __init__(self, label: str, unit: str, enabled: bool = True) -> None:
        self.progress = _progress(enabled)
        self.tasks = {}
        self.task = self.progress.add_task(escape(label), total=None, unit=unit)

    def __enter__(self) -> CountBar:
        super().__enter__()
        return self

    def update(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=max(total, 1))
