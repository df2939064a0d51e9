"""``sparkindex sync``: keep aliases in step with the source, until stopped or caught up.

SIGTERM, SIGINT (and ``sparkindex stop``) end a sync cleanly: the batch being applied finishes
and is acknowledged, or is abandoned unacknowledged (when the signal reached Spark's JVM too, as
systemd's does); the lock and holds are released, the summary printed, exit 0. A rerun resumes
from the acknowledged position. A second signal exits at once with code 3.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import orjson
import typer
from rich.markup import escape

from sparkindex.cli.render import err
from sparkindex.config import load_pipeline


def sync(
    config: Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")],
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
    pipeline = load_pipeline(config)
    if drop_slot:
        from sparkindex.capture.control import drop_consumer

        dropped = drop_consumer(pipeline, group or pipeline.sync.group)
        err.print(f"group {escape(group or pipeline.sync.group)}: " + ("slot dropped" if dropped else "no slot"))
        if json:
            _emit({"dropped": dropped})
        raise typer.Exit(0)
    if apply_deferred:
        from sparkindex.capture.sync.deferred import apply_deferred as run_deferred

        result = run_deferred(pipeline, index, group=group)
        err.print(f"deferred changes applied: {result}")
        if json:
            _emit(result)
        raise typer.Exit(0)
    from sparkindex.capture.sync.run import SyncRun
    from sparkindex.errors import UsageError
    from sparkindex.preflight import guard

    if on_gap not in (None, "reconcile", "fail"):
        raise UsageError(f"--on-gap: expected reconcile or fail, got {on_gap!r}")
    guard(pipeline, "sync", index)  # `sparkindex check`'s lines for what streaming needs; exit 2 on a FAIL
    run = SyncRun(
        pipeline,
        index,
        group=group,
        until_caught_up=until_caught_up,
        on_gap=on_gap,  # type: ignore[arg-type]
    )

    def _stop(signum: int, _frame: FrameType | None) -> None:
        if run.stop_requested.is_set():
            os.write(2, b"sync: second signal, exiting now (the batch in flight is not acknowledged)\n")
            os._exit(3)
        name = signal.Signals(signum).name
        os.write(2, f"sync: {name} received, stopping after the batch in flight\n".encode())
        run.stop_requested.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    summary = run.run()
    err.print(
        f"[green]sync[/] {escape(', '.join(run.aliases))}: {summary.applied:,} applied, {summary.deleted:,} deleted, "
        f"{summary.failed:,} failed in {summary.batches:,} batches; position {summary.position}, lag {summary.lag_s} s"
    )
    for alias, found in summary.reconciled.items():
        err.print(
            f"[yellow]reconciled[/] {escape(alias)} after a gap in the change log: "
            + ", ".join(f"{n:,} {kind}" for kind, n in found.items())
        )
    if json:
        _emit(summary.to_dict())
    raise typer.Exit(1 if summary.failed else 0)


def _emit(obj: object) -> None:
    sys.stdout.write(orjson.dumps(obj).decode() + "\n")
    sys.stdout.flush()
