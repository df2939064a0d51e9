"""The change model every change source produces and every consumer reads.

A change says only *which row* changed and where in the log: sparkindex never indexes the values
a log carries (an UPDATE in PostgreSQL omits unchanged TOASTed columns; a polled row may be
older than the commit that made it visible). Documents are rebuilt from the current rows by
key, so the values matter only where they lead to a parent document: the columns ``old`` and
``new`` carry, when the source has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

#: ``truncate``: every row of the table went at once (the log names no row: ``old``/``new`` None);
#: ``recheck``: a key diff's range of an index, whose documents may have lost their root rows
#: (``old`` holds ``alias``, ``lo`` and ``hi``; see :func:`recheck`)
Op = Literal["insert", "update", "delete", "truncate", "recheck"]

#: The Spark schema of the change stream: one row per change, plus one ``end`` row per batch
#: that carries the batch's end offset (so the sink learns it without a second query).
STREAM_DDL = "kind string, tbl string, op string, old string, new string, position long, ts double, offset string"


@dataclass(frozen=True)
class Change:
    """One committed row change.

    ``position`` is monotone in commit order (a PostgreSQL commit LSN, a MariaDB GTID sequence
    number, a polled column's value in microseconds): it orders writes per document (it becomes
    their external version) and tells a consumer group what it has already applied. ``old`` and
    ``new`` hold the column values the source knows before and after (``old`` is None for an
    insert, ``new`` for a delete; either may be partial). ``ts`` is the commit time (epoch s).
    """

    table: str
    op: Op
    position: int
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None
    ts: float = 0.0

    def values(self) -> list[dict[str, Any]]:
        """The row images this change knows (old first): each may lead to a different parent."""
        return [v for v in (self.old, self.new) if v]

    def to_row(self) -> tuple[Any, ...]:
        return (
            "change",
            self.table,
            self.op,
            _dump(self.old),
            _dump(self.new),
            self.position,
            self.ts,
            None,
        )

    @staticmethod
    def from_row(row: Any) -> Change:
        return Change(
            table=row[1],
            op=row[2],
            position=int(row[5]),
            old=_load(row[3]),
            new=_load(row[4]),
            ts=float(row[6] or 0.0),
        )


def recheck(table: str, alias: str, lo: str | None, hi: str | None, position: int) -> Change:
    """The documents of *alias* whose sort keys lie in [*lo*, *hi*) may have lost their root rows
    in *table* (deletes the source does not log): the apply step looks, as one Spark task."""
    return Change(table, "recheck", position, old={"alias": alias, "lo": lo, "hi": hi})


def end_row(offset: dict[str, Any], position: int, ts: float) -> tuple[Any, ...]:
    """The row that closes a batch: its end offset (as the source resumes from it) and position."""
    return ("end", None, None, None, None, position, ts, orjson.dumps(offset).decode())


def _dump(values: dict[str, Any] | None) -> str | None:
    if values is None:
        return None
    return orjson.dumps(values, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def _load(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    loaded: dict[str, Any] = orjson.loads(text)
    return loaded


@dataclass
class Batch:
    """What a source read for one micro-batch: its changes and where the next one starts."""

    changes: list[Change]
    offset: dict[str, Any]
    position: int
    #: commit time of the newest change read (epoch s), 0 when none
    ts: float = 0.0
    #: the source has more committed changes than this batch holds (a read limit was hit)
    more: bool = False
    #: source-specific facts; ``incomplete``: the read stopped before the end it was asked for
    extra: dict[str, Any] = field(default_factory=dict)
