"""The one thing each backend must supply: send a request, answer JSON or raise a classified error.

Both official clients bring connection pools, TLS, authentication, node failover and gzip; the
shared code needs nothing else from them. Requests go through the client's ``perform_request``
with bodies this package encodes itself (orjson; ``_bulk`` bodies are spliced bytes), so the
engine-specific code is the client's construction and the translation of its exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from sparkindex.targets.search_engine.engine import EngineInfo
from sparkindex.targets.search_engine.errors import HttpFailure, request_error


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    params: dict[str, str] | None = None
    #: encoded already: JSON, or NDJSON when *ndjson*
    body: bytes | None = None
    ndjson: bool = False
    #: overrides the configured request timeout (a long health wait, a write's deadline)
    timeout_s: float | None = None
    #: sent once, never resent by the client (a write under a deadline: a resend could land late)
    single_try: bool = False

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


class Transport(Protocol):
    """A backend's client, reduced to one call. Implementations are thread-safe."""

    def perform(self, request: Request) -> Any:
        """The decoded JSON answer of a 2xx; raises :class:`HttpFailure` for an error status,
        :class:`TransientError` when no server answered in time, :class:`PermanentError` for
        a misconfiguration the client detects (TLS verification, for one)."""
        ...

    def root(self, timeout_s: float) -> tuple[Any, dict[str, str]]:
        """``GET /`` in plain JSON: the server's answer and its headers (lower-case names), for
        :func:`~.engine.identify`. Errors as :meth:`perform`."""
        ...

    def speak(self, engine: EngineInfo) -> None:
        """From now on, talk to *engine* in what it accepts (called once, before any request
        but :meth:`root`)."""
        ...

    def close(self) -> None: ...


class EngineApi:
    """Requests with JSON bodies, errors worded once with what was attempted and where."""

    def __init__(self, transport: Transport, where: str, engine: EngineInfo) -> None:
        self.transport = transport
        self.where = where
        #: the server this talks to, as negotiated at connect
        self.engine = engine

    def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        ndjson_body: bytes | None = None,
        timeout_s: float | None = None,
        single_try: bool = False,
    ) -> Any:
        """Send; an error status raises :class:`HttpFailure` for the caller to interpret."""
        if ndjson_body is not None:
            return self.transport.perform(Request(method, path, params, ndjson_body, True, timeout_s, single_try))
        data = None if body is None else orjson.dumps(body)
        return self.transport.perform(Request(method, path, params, data, False, timeout_s, single_try))

    def call(
        self,
        method: str,
        path: str,
        what: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        missing_ok: bool = False,
        timeout_s: float | None = None,
    ) -> Any:
        """Send; a 404 gives None when *missing_ok*, other errors raise Transient/PermanentError."""
        try:
            return self.raw(method, path, body, params=params, timeout_s=timeout_s)
        except HttpFailure as failure:
            if missing_ok and failure.status == 404:
                return None
            raise request_error(failure, what, self.where) from None
