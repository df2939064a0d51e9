"""``sparkindex check``: a preflight of everything a run needs (issue 18).

One line per check, OK/WARN/FAIL, with what to do about it; ``--json`` prints
``{"checks": [{"name", "status", "detail", "fix"}], "ok"}`` as the last line of stdout (``ok``:
nothing failed, a run would start). Exit 0 when every check passed, 1 with warnings only, 2 on
any failure. The lines are the ones ``reindex`` and ``sync`` print when they refuse to start.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.text import Text

from sparkindex.cli.render import err, out
from sparkindex.config import load_pipeline
from sparkindex.config.job import parse_span
from sparkindex.errors import ConfigError, UsageError

STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}


def check(
    config: Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")],
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
    from sparkindex.preflight import Options, exit_code, report, run_checks
    from sparkindex.preflight.model import fail

    try:
        retention_s = parse_span(min_binlog_retention)
    except ValueError as exc:
        raise UsageError(f"--min-binlog-retention: {exc}") from None
    if min_free_disk_gb < 0:
        raise UsageError(f"--min-free-disk-gb: must not be negative, got {min_free_disk_gb}")
    options = Options(
        aliases=index,
        min_free_disk_bytes=int(min_free_disk_gb * (1 << 30)),
        min_binlog_retention_s=retention_s,
    )
    try:
        pipeline = load_pipeline(config)
    except ConfigError as exc:  # one FAIL line too: tools reading --json get the same shape
        checks = [fail("config", str(exc), f"correct {config} where the message says")]
    else:
        try:
            checks = run_checks(pipeline, options)
        except UsageError as exc:  # an unknown --index: the same shape, one FAIL line
            checks = [fail("index", str(exc), "name aliases the pipeline defines with --index")]
    console = err if json else out
    for c in checks:
        _show(console, c.status, c.line())
    counts = {s: sum(c.status == s for c in checks) for s in STYLE}
    err.print(", ".join(f"{n} {s}" for s, n in counts.items()), highlight=False)
    if json:
        sys.stdout.write(orjson.dumps(report(checks)).decode() + "\n")
        sys.stdout.flush()
    raise typer.Exit(exit_code(checks))


def _show(console: Console, status: str, line: str) -> None:
    """The line as the guard of a run prints it, its status word coloured on a terminal."""
    text = Text(line)
    text.stylize(STYLE[status], 0, len(status))
    console.print(text, highlight=False, soft_wrap=True)
