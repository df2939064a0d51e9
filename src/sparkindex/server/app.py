"""The Starlette application: routes, the token guard, the WebSocket hub and the verify schedule."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from sparkindex.config.secrets import error_line
from sparkindex.server import api, checks, control, sync_gaps, verified
from sparkindex.server.metrics import registry_for, render
from sparkindex.server.responses import BadRequest, error
from sparkindex.server.scheduled_verify import schedule
from sparkindex.server.state import ServerState
from sparkindex.server.ws import Hub

log = logging.getLogger(__name__)
STATIC = resources.files("sparkindex.server") / "static"
#: The page loads only its own files and talks only to its own server.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class GuardMiddleware:
    """Refuses foreign Hosts, reads from other machines without the token, and every state change
    (any method but GET/HEAD) without it; adds the security headers to every response."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # the WebSocket hub checks its own clients
            return
        request = Request(scope)
        guard = self.state.guard
        problem, status, headers = guard.host_problem(request), 421, None
        path = scope["path"]
        public = path == "/" or path.startswith("/static/") or path == "/favicon.ico"
        if problem is None and request.method not in ("GET", "HEAD"):
            problem, status = guard.token_problem(request), 401
        elif problem is None and not public and not guard.may_read(request):
            problem, status = "reading this server from another machine needs the token", 401
        if problem is not None:
            if status == 401:
                headers = {"WWW-Authenticate": 'Bearer realm="sparkindex"'}
            await error(problem, status, headers)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    return error(str(exc), exc.status, exc.headers)


async def store_down(request: Request, exc: Exception) -> Response:
    """A store that does not answer (restarted, taken down) is the operator's to know about, in
    one line, and the page's to show: 503, not a 500 with a stack in the log per request."""
    message = f"the coordination store did not answer: {error_line(exc)}"
    log.warning("%s %s: %s", request.method, request.url.path, message)
    return error(message, 503, {"Retry-After": "5"})


def page(request: Request) -> Response:
    return Response((STATIC / "index.html").read_bytes(), media_type="text/html; charset=utf-8")


def metrics(request: Request) -> Response:
    body, content_type = render(request.app.state.registry)
    return Response(body, media_type=content_type)


def build_app(state: ServerState) -> Starlette:
    hub = Hub(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub.start()
        scheduler = asyncio.get_running_loop().create_task(schedule(state))
        try:
            yield
        finally:
            scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scheduler
            await hub.stop()
            running = state.actions.running()
            if running:
                log.warning(
                    "leaving %d command(s) running (their jobs live in the store): %s",
                    len(running),
                    ", ".join(f"{a.kind} pid {a.pid}" for a in running),
                )
            state.close()

    async def ws_endpoint(websocket: WebSocket) -> None:
        await hub.serve(websocket)

    routes: list[Any] = [
        Route("/", page),
        Route("/metrics", metrics),
        WebSocketRoute("/ws", ws_endpoint),
        *api.ROUTES,
        *checks.ROUTES,
        *sync_gaps.ROUTES,
        *verified.ROUTES,
        *control.ROUTES,
        Mount("/static", app=StaticFiles(packages=[("sparkindex.server", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={BadRequest: bad_request, SQLAlchemyError: store_down},
        max_body_size=64 * 1024,
    )
    app.state.server = state
    app.state.hub = hub
    app.state.registry = registry_for(state)
    app.state.checks = checks.CheckCache(checks.pipeline_checks(state.pipeline))
    app.add_middleware(GuardMiddleware, state=state)
    return app
