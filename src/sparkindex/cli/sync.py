"""``sparkindex sync``: keep aliases in step with the source, until stopped or caught up.

SIGTERM, SIGINT (and ``sparkindex stop``) end a sync cleanly: the batch being applied finishes
and is acknowledged, or is abandoned unacknowledged (when the signal reached Spark's JVM too, as
systemd's does); the lock and holds are released, the summary printed, exit 0. A rerun resumes
from the acknowledged position. A second signal exits at once with code 3.

``--metrics-port`` serves the running sync's ``/metrics``, ``/healthz`` and ``/livez`` from this
process (:mod:`sparkindex.server.sync_endpoint`, over the api's :class:`~sparkindex.api.SyncMonitor`);
the port is bound before the sync starts and freed when it ends, whichever way.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, Literal, cast

import typer
from rich.markup import escape

from sparkindex import api
from sparkindex.api.sync_monitor import STALL_AFTER_S
from sparkindex.cli.bars import RichBars
from sparkindex.cli.options import StateDirOpt
from sparkindex.cli.render import emit_json, err
from sparkindex.config.model import Pipeline


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
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="serve /metrics (Prometheus, serve's names), /healthz (ready) and /livez (alive) on this port while "
            "the sync runs; 0: any free port, printed at start",
        ),
    ] = None,
    metrics_host: Annotated[
        str | None,
        typer.Option(
            "--metrics-host", help="address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 in a container)"
        ),
    ] = None,
    stall_after_s: Annotated[
        float | None,
        typer.Option(
            "--stall-after-s",
            min=0.001,
            help="seconds the stream may go without advancing while changes wait before /healthz calls it stalled "
            f"(default {STALL_AFTER_S:g}: longer than a full batch of sync.max_batch_changes takes on a small machine, "
            "shorter than the 300 s a failing stream is retried before the sync gives up)",
        ),
    ] = None,
) -> None:
    """Apply every committed insert, update and delete to the aliases, in order per document."""
    pipeline = api.load(config, state_dir)
    if metrics_port is None and (metrics_host is not None or stall_after_s is not None):
        raise api.UsageError("--metrics-host and --stall-after-s go with --metrics-port")
    if metrics_port is not None and (drop_slot or apply_deferred):
        raise api.UsageError("--metrics-port serves a running sync, not --drop-slot or --apply-deferred")
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
    monitor: api.SyncMonitor | None = None
    endpoint: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if metrics_port is not None:
        monitor = api.SyncMonitor(stall_after_s=stall_after_s or STALL_AFTER_S, group=group or pipeline.sync.group)
        endpoint = _endpoint(pipeline, monitor, metrics_host or "127.0.0.1", metrics_port)
    with endpoint:  # closed (its port freed) however the sync ends
        summary = api.sync(
            pipeline,
            index,
            group=group,
            until_caught_up=until_caught_up,
            on_gap=cast(Literal["reconcile", "fail"] | None, on_gap),
            stop=stop,
            progress=RichBars(enabled=err.is_terminal),  # a service's log gets the summary, not a bar
            monitor=monitor,
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


def _endpoint(
    pipeline: Pipeline, monitor: api.SyncMonitor, host: str, port: int
) -> contextlib.AbstractContextManager[Any]:
    """The sync's /metrics, /healthz and /livez, listening before the sync starts (a port in use
    is exit 2 before any JVM starts); the server extra's libraries, or one line naming it."""
    from sparkindex.extras import require

    require("server", "sync --metrics-port (the sync's /metrics, /healthz and /livez)")
    from sparkindex.server.sync_endpoint import SyncEndpoint

    endpoint = SyncEndpoint(pipeline, monitor, host=host, port=port)
    err.print(f"sync: /metrics, /healthz and /livez on {escape(endpoint.url)}", soft_wrap=True)
    return endpoint
