"""Keeping passwords and tokens out of logs, errors and printed config."""

from __future__ import annotations

import re

#: a password runs to the userinfo's "@": it may hold "/", "?" or "#" (SQLAlchemy reads
#: ``postgresql://u:pa/ss@h/db`` as the password "pa/ss"); over-hiding a port is the safe side
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")
_QUERY_SECRET = re.compile(r"(?i)(?P<key>(?:password|passwd|pwd|token|api_key|apikey|secret)=)[^&\s]*")


def redact_url(text: str) -> str:
    """Hide the password of every URL in *text* (and secret-looking query parameters)."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", text)


def error_line(exc: object) -> str:
    """An error's first non-empty line, its passwords hidden: drivers append context lines and
    SQL, and echo connection strings. SQLAlchemy's wrapper is skipped for the driver's own text."""
    orig = getattr(exc, "orig", None)
    for line in redact_url(str(orig if orig is not None else exc)).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
