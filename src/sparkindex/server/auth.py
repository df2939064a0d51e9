"""Who may do what: reads are open to this machine, changes need the bearer token.

State-changing requests must carry ``Authorization: Bearer <token>``. A header is never sent by a
browser on its own, so another site cannot make a visitor's browser stop a job (no CSRF), and it
never lands in an access log the way a query string would. Reads need no token from loopback
clients; from anywhere else they need it too. While the server listens on loopback only, requests
must also name a loopback Host (a page on another site that rebinds its DNS name to 127.0.0.1
cannot read it), and WebSocket handshakes from another origin are refused.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

TOKEN_ENV = "SPARKINDEX_TOKEN"
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def resolve_token(env: dict[str, str] | None = None) -> tuple[str, bool]:
    """The token from ``SPARKINDEX_TOKEN``, or a fresh random one; True when it was generated."""
    value = (env if env is not None else os.environ).get(TOKEN_ENV, "").strip()
    if value:
        return value, False
    return secrets.token_urlsafe(24), True


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> str:
    """The host part of a Host header value or an Origin URL (port and brackets dropped)."""
    if "://" in value:
        return urlsplit(value).hostname or ""
    return urlsplit(f"//{value}").hostname or ""


@dataclass(frozen=True)
class Guard:
    token: str
    #: the address the server listens on; loopback means Host headers must name loopback too
    bind_host: str

    def token_ok(self, conn: HTTPConnection) -> bool:
        scheme, _, value = conn.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())

    def token_problem(self, conn: HTTPConnection) -> str | None:
        """Why this request may not change anything, or None when its token is right."""
        header = conn.headers.get("authorization")
        if not header:
            return f"this action needs the server's token: send 'Authorization: Bearer <token>' ({TOKEN_ENV})"
        if not self.token_ok(conn):
            return "wrong token"
        return None

    def may_read(self, conn: HTTPConnection) -> bool:
        client = conn.client.host if conn.client else None
        return is_loopback(client) or self.token_ok(conn)

    def host_problem(self, conn: HTTPConnection) -> str | None:
        """A request a loopback-only server must refuse: a foreign Host, or a foreign WebSocket Origin."""
        if not is_loopback(self.bind_host):
            return None
        host = conn.headers.get("host", "")
        if host and not is_loopback(_host_name(host)):
            return f"unexpected Host {host!r}: this server answers only to localhost names"
        origin = conn.headers.get("origin")
        if conn.scope["type"] == "websocket" and origin and origin != "null" and not is_loopback(_host_name(origin)):
            return f"WebSocket from origin {origin!r} refused"
        return None
