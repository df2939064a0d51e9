"""``sync --metrics-port``: a running sync's ``/metrics``, ``/healthz`` and ``/livez``, served from the
sync's own process.

* ``/metrics``: the store's up gauge and the change-capture families of the sync's consumer group, as
  ``serve`` names them (:class:`~sparkindex.server.metrics.GroupCollector`, over the same store reads
  ``serve`` makes), plus the process's own view of its stream: ``sparkindex_sync_healthy``,
  ``sparkindex_sync_live``, ``sparkindex_sync_status{status}``, ``sparkindex_sync_since_advance_seconds``
  and, when the log was read for it, ``sparkindex_sync_oldest_pending_seconds``.
* ``/healthz``: readiness, 200 while the sync keeps its aliases current, else 503; ``/livez``: liveness,
  503 only when the stream is stuck in a way a restart may cure. Both answer the same small JSON object
  (``{"status": "ok", "group": ..., ...}``, with ``reason`` when it is not ok). The rule is the api's
  :class:`~sparkindex.api.SyncMonitor`.

Lighter than ``serve``: no event loop, no page, no token. A threaded WSGI server from the standard library
(each request on a daemon thread of its own, so a scrape waiting on the store never holds ``/healthz``)
runs on one thread beside the sync; prometheus_client's WSGI app renders ``/metrics`` (content
negotiation and compression included). ``/healthz`` and ``/livez`` never wait for a database: the
health's looks at the change log run on a thread of their own (:mod:`sparkindex.capture.sync.health`).
:class:`SyncEndpoint` is a context manager: leaving it stops the thread, closes the listening socket
(the port is free again), waits briefly for the requests in flight, and closes the store reads.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sparkindex.api import ConfigError, SyncMonitor
from sparkindex.api.sync_monitor import STATUSES
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import error_line
from sparkindex.server.auth import Guard
from sparkindex.server.metrics import GroupCollector
from sparkindex.server.state import ServerState

log = logging.getLogger(__name__)

#: the default of ``sync --metrics-port``: the port range Prometheus's exporters use, next to the
#: node exporter's 9100 and off serve's 8484
DEFAULT_PORT = 9464
PATHS = ("/metrics", "/healthz", "/livez")
#: how long closing waits for requests in flight (a /metrics scrape reads the store)
CLOSE_WAIT_S = 5.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class HealthCollector(Collector):
    """The sync process's own gauges: what its stream looks like from inside (:class:`SyncMonitor`)."""

    def __init__(self, monitor: SyncMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        health = self.monitor.health()
        group = [health.group]
        yield _flag(
            "sparkindex_sync_healthy", "1 while the sync keeps its aliases current (/healthz)", group, health.healthy
        )
        yield _flag(
            "sparkindex_sync_live",
            "1 unless its stream is stuck so that a restart may cure it (/livez)",
            group,
            health.live,
        )
        status = GaugeMetricFamily(
            "sparkindex_sync_status",
            "the sync's state: 1 for the current one (starting, ok, held, reconciling, stalled, unknown, stopping, "
            "stopped)",
            labels=["group", "status"],
        )
        for name in STATUSES:
            status.add_metric([health.group, name], 1 if name == health.status else 0)
        yield status
        since = GaugeMetricFamily(
            "sparkindex_sync_since_advance_seconds",
            "since the stream last advanced (a batch acknowledged, a gap reconciled, a hand-over ended)",
            labels=["group"],
        )
        if health.since_advance_s is not None:
            since.add_metric(group, health.since_advance_s)
        yield since
        oldest = GaugeMetricFamily(
            "sparkindex_sync_oldest_pending_seconds",
            "how long the oldest change not yet applied has waited, when the stream stopped advancing",
            labels=["group"],
        )
        if health.oldest_pending_s is not None:
            oldest.add_metric(group, health.oldest_pending_s)
        yield oldest


def _flag(name: str, doc: str, group: list[str], value: bool) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["group"])
    family.add_metric(group, 1 if value else 0)
    return family


class _Quiet(WSGIRequestHandler):
    """No line on stderr per request (a scrape every 15 s would fill the sync's log)."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("sync endpoint: " + format, *args)


class _Server(ThreadingMixIn, WSGIServer):
    """Each request on a thread of its own, counted while it runs, so that closing waits for the
    requests in flight before the store reads they use are closed."""

    daemon_threads = True  # a request that does not end never keeps the process from exiting
    allow_reuse_address = True  # a restarted sync binds the port again at once (TIME_WAIT)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._in_flight = 0
        self._idle = threading.Condition()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._idle:  # counted before its thread starts: a close right after accepting waits for it
            self._in_flight += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done()

    def _done(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight (up to *timeout*); False if some still are."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)


class _Server6(_Server):
    address_family = socket.AF_INET6


class SyncEndpoint:
    """``/metrics``, ``/healthz`` and ``/livez`` of the sync that *monitor* is handed to, on
    *host*:*port* (port 0: any free port, :attr:`port` says which), from start until closed."""

    def __init__(
        self, pipeline: Pipeline, monitor: SyncMonitor, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT
    ) -> None:
        self.monitor = monitor
        # the store reads serve's metrics make (its guard is never consulted: this endpoint only reads)
        self.state = ServerState.open(pipeline, Path(pipeline.origin), Guard("", host))
        try:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(GroupCollector(self.state, monitor.group))
            registry.register(HealthCollector(monitor))
            self._metrics = make_wsgi_app(registry)
            server = _Server6 if ":" in host else _Server
            try:
                self._httpd = make_server(host, port, self._app, server_class=server, handler_class=_Quiet)
            except OSError as exc:
                raise ConfigError(
                    f"the sync's metrics endpoint cannot listen on {host}:{port}: {exc.strerror or exc}"
                ) from None
        except BaseException:
            self.state.close()
            raise
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="sparkindex-sync-endpoint",
            daemon=True,
        )
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving, free the port, close the store reads; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._httpd.shutdown()  # serve_forever returns within its poll interval
            self._thread.join(timeout=10)
            self._httpd.server_close()
            if not self._httpd.wait_idle(CLOSE_WAIT_S):  # a scrape still reading the store
                log.warning("the sync's metrics endpoint closes with a request still in flight")
        finally:
            self.state.close()

    def __enter__(self) -> SyncEndpoint:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the WSGI application ----------------------------------------------------------------------
    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO") or "/", environ.get("REQUEST_METHOD", "GET")
        if path not in PATHS:
            return _json(start_response, "404 Not Found", {"error": f"not found: {path}", "paths": list(PATHS)})
        if method not in ("GET", "HEAD"):
            return _json(start_response, "405 Method Not Allowed", {"error": f"{method} is not allowed here"})
        if path == "/metrics":
            body: Iterable[bytes] = self._metrics(environ, start_response)
            return body
        try:
            health = self.monitor.health()
        except Exception as exc:  # noqa: BLE001 - a health that cannot be told is not healthy
            log.warning("the sync's health could not be told: %s", error_line(exc))
            return _json(start_response, "503 Service Unavailable", {"status": "unknown", "reason": error_line(exc)})
        ok = health.healthy if path == "/healthz" else health.live
        return _json(start_response, "200 OK" if ok else "503 Service Unavailable", health.to_dict())


def _json(start_response: StartResponse, status: str, body: dict[str, Any]) -> list[bytes]:
    data = orjson.dumps(body)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))), ("Cache-Control", "no-store")]
    start_response(status, headers)
    return [data]
