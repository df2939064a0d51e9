"""The statements row-based logging still writes as text, read back: ``TRUNCATE``."""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

_NAME = r"(`(?:[^`]|``)+`|[\w$]+)"
_COMMENTS = re.compile(r"(?:\s+|/\*.*?\*/|#[^\n]*(?:\n|$)|--\s[^\n]*(?:\n|$))*", re.DOTALL)
_TRUNCATE = re.compile(
    rf"truncate\s+(?:table\s+)?(?:{_NAME}\s*\.\s*)?{_NAME}(?:\s+(?:wait\s+\d+|nowait))?\s*;?\s*", re.IGNORECASE
)


def truncated_table(query: str, database: str, schema: bytes | str | None) -> str | None:
    """The table a ``TRUNCATE`` statement of the binlog empties, if it is one of *database*'s
    (*schema*: the statement's default database), as the statement spells it. Row-based logging
    still logs it as a statement. One that cannot be read is logged, never silently passed over."""
    head = _COMMENTS.match(query)
    body = query[head.end() :] if head else query
    if body[:8].lower() != "truncate":
        return None
    m = _TRUNCATE.fullmatch(body)
    if m is None:
        log.warning("a TRUNCATE in the binlog was not understood; its documents may be stale: %.200s", body)
        return None
    default = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else (schema or "")
    db = _unquote(m.group(1)) if m.group(1) else default
    return _unquote(m.group(2)) if db.lower() == database.lower() else None


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name
