"""``sparkindex sync``: keep aliases in step with the source, until stopped or caught up.

SIGTERM, SIGINT (and ``sparkindex stop``) end a sync cleanly: the batch being applied finishes
and is acknowledged, or is abandoned unacknowledged (when the signal reached Spark's JVM too, as
systemd's does); the lock and holds are released, the summary printed, exit 0. A rerun resumes
from the acknowledged position. A second signal exits at once with code 3.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated, Literal, cast

import typer
from rich.markup import escape

from sparkindex import api
from sparkindex.cli.bars import RichBars
from sparkindex.cli.options import StateDirOpt
from sparkindex.cli.render import emit_json, err


def sync(
    config: Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")],
    state_dir: StateDirOpt = None,
    index: Annotated[list[str] | None, typer.Option("--index", "-i", help="alias (repeatable); default all")] = None,
    until_caught_up: Annotated[
        bool, typer.Option("--until-caught-up", help="apply what was committed by the start, then exit")
    ] = False,
    json: Annotated[bool, typer.Option("--json", help="print one JSON object on the last line")] = False,
    group: Annotated[str | None, typer.Option("--group", help="consumer group (default: sync.group)")] = None,
    drop_slot: Annotated[
        bool, typer.Option("--drop-slot", help="remove the group's replication slot and offsets, then exit")
    ] = False,
    apply_deferred: Annotated[
        bool, typer.Option("--apply-deferred", help="apply the recorded deferred changes, then exit")
    ] = False,
    on_gap: Annotated[
        str | None,
        typer.Option(
            "--on-gap",
            help="when the log cannot serve the stored position: reconcile (verify/repair, then stream) or fail; "
            "default: sync.on_gap",
        ),
    ] = None,
) -> None:
    """Apply every committed insert, update and delete to the aliases, in order per document."""
    pipeline = api.load(config, state_dir)
    if drop_slot:
        dropped = api.drop_slot(pipeline, group)
        err.print(f"group {escape(dropped.group)}: " + ("slot dropped" if dropped.dropped else "no slot"))
        if json:
            emit_json(dropped.to_dict())
        raise typer.Exit(0)
    if apply_deferred:
        applied = api.apply_deferred(pipeline, index, group=group, progress=RichBars(enabled=err.is_terminal))
        err.print(f"deferred changes applied: {applied.to_dict()}")
        if json:
            emit_json(applied.to_dict())
        raise typer.Exit(0)
    if on_gap not in (None, "reconcile", "fail"):
        raise api.UsageError(f"--on-gap: expected reconcile or fail, got {on_gap!r}")
    stop = api.StopToken(signals=True)  # this process stops cleanly on SIGTERM: `sparkindex stop` may send one

    def _stop(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            os.write(2, b"sync: second signal, exiting now (the batch in flight is not acknowledged)\n")
            os._exit(3)
        name = signal.Signals(signum).name
        os.write(2, f"sync: {name} received, stopping after the batch in flight\n".encode())
        stop.set()

    signal.signal(signal.SIGTERM, _stop)  # the CLI's own process: a library call installs no handler
    signal.signal(signal.SIGINT, _stop)
    summary = api.sync(
        pipeline,
        index,
        group=group,
        until_caught_up=until_caught_up,
        on_gap=cast(Literal["reconcile", "fail"] | None, on_gap),
        stop=stop,
        progress=RichBars(enabled=err.is_terminal),  # a service's log gets the summary, not a bar
    )
    err.print(
        f"[green]sync[/] {escape(', '.join(summary.aliases))}: {summary.applied:,} applied, "
        f"{summary.deleted:,} deleted, {summary.failed:,} failed in {summary.batches:,} batches; "
        f"position {summary.position}, lag {summary.lag_s} s"
    )
    for alias, found in summary.reconciled.items():
        err.print(
            f"[yellow]reconciled[/] {escape(alias)} after a gap in the change log: "
            + ", ".join(f"{n:,} {kind}" for kind, n in found.items())
        )
    if json:
        emit_json(summary.to_dict())
    raise typer.Exit(summary.outcome.exit_code)
