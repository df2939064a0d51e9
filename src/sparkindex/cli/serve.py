"""``sparkindex serve``: the progress server on 127.0.0.1:8484 (page, REST, WebSocket, metrics)."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path
from typing import Annotated

import typer

from sparkindex import api
from sparkindex.cli.options import StateDirOpt
from sparkindex.cli.render import err


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts: a taken port is a clear usage error
    (uvicorn would log and exit 1), and ``--port 0`` gets a free port whose number is printed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise api.UsageError(f"--host {host!r}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
        raise api.UsageError(f"{host}:{port} {why}; choose another with --port") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    config: Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")],
    state_dir: StateDirOpt = None,
    host: Annotated[str, typer.Option(help="address to listen on; loopback keeps the server on this machine")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free port, printed)")] = 8484,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
) -> None:
    """The progress server: web page, REST API, WebSocket progress (/ws) and Prometheus metrics (/metrics).

    Starting, stopping, re-driving and verifying need the bearer token: SPARKINDEX_TOKEN, or one
    generated and printed at start. Reads are open from this machine.
    """
    from sparkindex.extras import require

    require("server", "sparkindex serve")
    import uvicorn

    from sparkindex.server.app import build_app
    from sparkindex.server.auth import TOKEN_ENV, Guard, is_loopback, resolve_token
    from sparkindex.server.state import ServerState

    pipeline = api.load(config, state_dir)
    token, generated = resolve_token()
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    state = ServerState.open(pipeline, config, Guard(token=token, bind_host=host))
    shown = f"[{host}]" if ":" in host else host
    err.print(f"sparkindex serve: listening on http://{shown}:{bound_port}/", markup=False, highlight=False)
    if generated:
        err.print(f"token (for stop, re-drive, verify, reindex): {token}", markup=False, highlight=False)
        err.print(f"  set {TOKEN_ENV} to choose your own", markup=False, highlight=False)
    if not is_loopback(host):
        err.print(
            "note: listening beyond this machine; reads from other machines need the token too",
            markup=False,
            highlight=False,
        )
    logging.getLogger("sparkindex").setLevel(logging.INFO)
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(state),
            log_level=log_level,
            access_log=log_level in ("info", "debug", "trace"),
            ws_max_size=64 * 1024,  # clients only ever send {"watch": id}
            timeout_graceful_shutdown=5,  # open WebSockets do not hold up Ctrl-C
        )
    )
    server.run(sockets=[sock])
