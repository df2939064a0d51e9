"""wal2json (format-version 2) rows as changes: whole transactions, in commit order."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import orjson

from sparkindex.sources.change_model import Change
from sparkindex.sources.postgres.slots import lsn_int

#: wal2json's one-letter actions that change a row
OPS = {"I": "insert", "U": "update", "D": "delete", "T": "truncate"}
#: wal2json add-tables escapes these with a backslash
_ESCAPE = re.compile(r"([\\,.* ])")


def parse_rows(
    rows: list[tuple[str, str]], after: int, names: dict[tuple[str, str], str]
) -> tuple[list[Change], int, float]:
    """The changes of the transactions committed after *after*, the end of the last one and its
    commit time (*after* and 0.0 when none was)."""
    changes: list[Change] = []
    txn: list[dict[str, Any]] = []
    end, ts = after, 0.0
    for lsn, data in rows:
        msg = orjson.loads(data)
        action = msg.get("action")
        if action == "B":
            txn = []
        elif action in OPS:
            txn.append(msg)
        elif action == "C":
            position = lsn_int(lsn)
            commit_ts = _timestamp(msg.get("timestamp"))
            if position > after:
                changes.extend(_change(m, names, position, commit_ts) for m in txn)
                end, ts = position, commit_ts
            txn = []
    return changes, end, ts


def _change(msg: dict[str, Any], names: dict[tuple[str, str], str], position: int, ts: float) -> Change:
    table = names.get((msg["schema"], msg["table"]), msg["table"])
    new = {c["name"]: c.get("value") for c in msg.get("columns", ())} or None
    old = {c["name"]: c.get("value") for c in msg.get("identity", ())} or None
    return Change(table, OPS[msg["action"]], position, old, new, ts)  # type: ignore[arg-type]


def add_tables(names: dict[tuple[str, str], str]) -> str:
    """wal2json's ``add-tables`` option for *names* (one that matches nothing when empty)."""
    return ",".join(f"{_escape(s)}.{_escape(t)}" for s, t in names) or "-.-"


def _timestamp(text: str | None) -> float:
    if not text:
        return time.time()
    try:
        return dt.datetime.fromisoformat(text if len(text) > 22 else text + ":00").timestamp()
    except ValueError:
        return time.time()


def _escape(name: str) -> str:
    return _ESCAPE.sub(r"\\\1", name)
