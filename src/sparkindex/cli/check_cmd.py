"""``sparkindex check``: a preflight of everything a run needs, before the run finds out.

One line per check, OK/WARN/FAIL, with what to do about it; ``--json`` prints
``{"checks": [{"name", "status", "detail", "fix"}], "ok"}`` as the last line of stdout (``ok``:
nothing failed, a run would start). Exit 0 when every check passed, 1 with warnings only, 2 on
any failure. The lines are the ones ``reindex`` and ``sync`` print when they refuse to start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from sparkindex import api
from sparkindex.cli.options import StateDirOpt
from sparkindex.cli.render import emit_json, err, out
from sparkindex.config.job import parse_span

STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}


def check(
    config: Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")],
    state_dir: StateDirOpt = None,
    index: Annotated[list[str] | None, typer.Option("--index", "-i", help="alias (repeatable); default all")] = None,
    json: Annotated[bool, typer.Option("--json", help="print one JSON object on the last line")] = False,
    min_free_disk_gb: Annotated[
        float, typer.Option("--min-free-disk-gb", help="Tantivy: warn under this much free disk (GiB)")
    ] = 1.0,
    min_binlog_retention: Annotated[
        str, typer.Option("--min-binlog-retention", help="MariaDB: warn when binlogs expire sooner (7d, 48h)")
    ] = "7d",
) -> None:
    """Check the source, change capture, store, target and Spark before anything runs."""
    try:
        retention_s = parse_span(min_binlog_retention)
    except ValueError as exc:
        raise api.UsageError(f"--min-binlog-retention: {exc}") from None
    if min_free_disk_gb < 0:
        raise api.UsageError(f"--min-free-disk-gb: must not be negative, got {min_free_disk_gb}")
    # a pipeline that does not load, or an unknown --index, is one FAIL line of the same shape
    result = api.check(
        config,
        index,
        min_free_disk_bytes=int(min_free_disk_gb * (1 << 30)),
        min_binlog_retention_s=retention_s,
        state_dir=state_dir,
    )
    console = err if json else out
    for c, line in zip(result.checks, result.lines, strict=True):
        _show(console, c["status"], line)
    counts = {s: sum(c["status"] == s for c in result.checks) for s in STYLE}
    err.print(", ".join(f"{n} {s}" for s, n in counts.items()), highlight=False)
    if json:
        emit_json(result.to_dict())
    raise typer.Exit(result.exit_code)


def _show(console: Console, status: str, line: str) -> None:
    """The line as the guard of a run prints it, its status word coloured on a terminal."""
    text = Text(line)
    text.stylize(STYLE[status], 0, len(status))
    console.print(text, highlight=False, soft_wrap=True)
