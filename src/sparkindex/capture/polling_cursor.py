"""Keyset cursors for polling change capture: where each table's read resumes, exactly.

The monotone column alone cannot cut a batch. One ``UPDATE … SET updated_at = now()`` gives
thousands of rows the same value: "value > last" then loses the rest of the tie, and
"value >= last" fills every batch with rows already delivered (measured on 2d9d709: 6,667 tied
rows, batch 500, every sync applied 0 and exited 0). So each table is read in (column, row key)
order and resumes after the last row it delivered, ``column > v OR (column = v AND key > k)``:
a tie of any size is walked across batches, and every batch inside it still moves the offset.

The database compares and orders, in its own collation (a string key under an ICU or ``_ci``
collation sorts differently in Python); Python only merges the tables' sorted reads by position.
The comparison is spelled out column by column rather than as a row-value tuple, which not every
dialect compares the same way, and it puts NULL key parts last (a table without a primary key
falls back to columns that may be NULL).

Cursor values are the raw values the driver returned, so the database compares them with what it
stores: SQLite keeps date/times as text, and a value bound through SQLAlchemy's ``DateTime`` gets
another text format ('… 00:00:10.000000' never equals '… 00:00:10'). They travel in the offset as
tagged JSON (:func:`encode`), because offsets are JSON in Spark's checkpoint and in the store.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from sparkindex.errors import ConfigError
from sparkindex.sources.base import TableInfo

_TAG = "$t"
#: what each tag's value is turned back into
_DECODE: dict[str, Any] = {
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "timedelta": lambda v: dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "decimal": decimal.Decimal,
    "bytes": base64.b64decode,
    "uuid": uuid.UUID,
    "float": float,  # inf and nan, which JSON cannot carry as numbers
    "str": str,  # a driver type JSON cannot carry (an address, a range): bound as text, cast by the column's type
}


def encode(value: Any) -> Any:
    """A raw driver value as JSON that :func:`decode` turns back into an equal value."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else {_TAG: "float", "v": str(value)}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return {_TAG: _kind(value), "v": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {_TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, decimal.Decimal):
        return {_TAG: "decimal", "v": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {_TAG: "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {_TAG: "uuid", "v": str(value)}
    return {_TAG: "str", "v": str(value)}


def _kind(value: dt.date | dt.time) -> str:
    """The tag of a date/time value (a driver's subclass included): the standard type it is."""
    if isinstance(value, dt.datetime):
        return "datetime"
    return "date" if isinstance(value, dt.date) else "time"


def decode(value: Any) -> Any:
    if isinstance(value, dict) and _TAG in value:
        return _DECODE[str(value[_TAG])](value["v"])
    return value


@dataclass(frozen=True)
class PollOffset:
    """The polling source's offset, as a value.

    Each table resumes on its own: after its cursor, the last row it delivered, or, while none
    of its rows has been delivered, after its floor (a position: integers as they are, date/times
    in microseconds). Tables need not share a scale (one index may poll a per-table integer
    version, another a timestamp), so no table resumes from another's value.

    ``ts`` is the position of the whole offset, monotone from batch to batch: every row at or
    below it has been delivered, late commits aside (across tables of different scales it is
    only a lower bound that never goes back). ``window`` lists ``[table, row digest, number]``
    of the rows delivered within the overlap window, so a late commit is found exactly once;
    ``diffs`` counts key diffs (a batch of deletes alone must still move the offset).

    An offset from before cursors existed (``{"ts", "w", "d"}``) read every table from one
    position and may have cut a tie at ``ts``, keeping only what lay above it: every table
    resumes from ``ts - 1``, so the rows at ``ts`` come again (those its window names are known
    and skipped).
    """

    ts: int
    #: table -> [column, encoded value, [encoded key parts]] of the last row delivered
    cursors: dict[str, list[Any]] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)
    window: list[list[Any]] = field(default_factory=list)
    diffs: int = 0
    #: the floor of a table the offset does not name
    default_floor: int = 0

    @classmethod
    def load(cls, offset: Mapping[str, Any]) -> PollOffset:
        ts = int(offset.get("ts", 0))
        window = [list(w) for w in offset.get("w", [])]
        diffs = int(offset.get("d", 0))
        if "c" not in offset:  # written before cursors existed
            return cls(ts, {}, {}, window, diffs, ts - 1)
        cursors = {str(t): list(c) for t, c in dict(offset["c"]).items()}
        floors = {str(t): int(n) for t, n in dict(offset.get("f", {})).items()}
        return cls(ts, cursors, floors, window, diffs, ts)

    def floor(self, table: str) -> int:
        return self.floors.get(table, self.default_floor)

    def dump(self) -> dict[str, Any]:
        return {"ts": self.ts, "c": self.cursors, "f": self.floors, "w": self.window, "d": self.diffs}


def cursor_key(info: TableInfo, tombstones: bool) -> tuple[str, ...]:
    """The columns that order a table's rows within one value of the polling column: the primary
    key; for a tombstone table without one, the deleted row's table and key (two tombstones that
    agree on both and on the column say the same thing); else a unique key; else every column
    the database can compare (rows equal in all of them are the same change)."""
    if info.primary_key:
        return info.primary_key
    if tombstones and {"tbl", "row_key"} <= set(info.columns):
        return ("tbl", "row_key")
    if info.unique_keys:
        return info.unique_keys[0]
    usable = tuple(
        name
        for name, col in info.columns.items()
        if not isinstance(col.type, sa.JSON | sa.ARRAY | sa.PickleType | sa.types.NullType)
    )
    if not usable:
        raise ConfigError(f"changes: table {info.name!r} has no key and no column that can order its rows")
    return usable


class Keyset:
    """One table's reads in (column, key) order, and the conditions that resume them."""

    def __init__(self, info: TableInfo, column: str, key: Sequence[str], raw_binds: bool) -> None:
        self.info = info
        self.column = info.table.c[column]
        self.keys = [info.table.c[k] for k in key]
        self.nullable = [info.columns[k].nullable for k in key]
        #: SQLite: bind values untyped, as the driver returned them (see the module's docstring);
        #: elsewhere through the column's type, so the server casts them to it
        self.raw_binds = raw_binds
        taken = set(info.columns)
        self.labels = [_free(f"_poll_{n}", taken) for n in range(1 + len(self.keys))]

    def select(self) -> sa.Select[Any]:
        """The table's rows, plus the raw cursor values under :attr:`labels`, in keyset order."""
        order: list[Any] = [self.column]
        for col, nullable in zip(self.keys, self.nullable, strict=True):
            order.extend([col.is_(None), col] if nullable else [col])
        return self._rows().order_by(*order)

    def last(self) -> sa.Select[Any]:
        """The table's last row in keyset order: where a reader that starts now resumes."""
        order: list[Any] = [self.column.desc()]
        for col, nullable in zip(self.keys, self.nullable, strict=True):
            order.extend([col.is_(None).desc(), col.desc()] if nullable else [col.desc()])
        return self._rows().order_by(*order).limit(1)

    def _rows(self) -> sa.Select[Any]:
        raw = [
            sa.type_coerce(c, sa.types.NullType()).label(n)
            for c, n in zip([self.column, *self.keys], self.labels, strict=True)
        ]
        return sa.select(self.info.table, *raw).where(self.column.is_not(None))

    def split(self, mapping: Mapping[Any, Any]) -> tuple[dict[str, Any], list[Any]]:
        """(the row as the table's columns, its cursor ``[column, value, [key parts]]`` as JSON)."""
        row = {name: mapping[name] for name in self.info.columns}
        raw = [encode(mapping[label]) for label in self.labels]
        return row, [self.column.name, raw[0], raw[1:]]

    def usable(self, cursor: Sequence[Any] | None) -> bool:
        """Whether *cursor* was written for this column and key (a changed config starts over
        from the offset's floor rather than compare values of another column)."""
        return cursor is not None and cursor[0] == self.column.name and len(cursor[2]) == len(self.keys)

    def after(self, cursor: Sequence[Any]) -> sa.ColumnElement[bool]:
        """Rows after *cursor*. The leading ``column >= v`` lets the database range-scan an
        index on the column; the rest is the exact lexicographic order."""
        parts = self._parts(cursor)
        return sa.and_(parts[0][0] >= parts[0][1], self._greater(parts))

    def upto(self, cursor: Sequence[Any]) -> sa.ColumnElement[bool]:
        """Rows at or before *cursor* (the negation of :meth:`after`, two-valued even with NULLs)."""
        parts = self._parts(cursor)
        return sa.and_(parts[0][0] <= parts[0][1], sa.not_(self._greater(parts)))

    def _parts(self, cursor: Sequence[Any]) -> list[tuple[sa.ColumnElement[Any], Any, bool]]:
        """(column, bound value or None, nullable) of the column and each key part. Raw binds
        compare with the column seen as untyped too: SQLAlchemy gives an untyped bind the type of
        the column it is compared with, whose SQLite date/time formatting is what must not apply."""
        values = [decode(cursor[1]), *(decode(v) for v in cursor[2])]
        columns: list[sa.ColumnElement[Any]] = [self.column, *self.keys]
        if self.raw_binds:
            columns = [sa.type_coerce(c, sa.types.NullType()) for c in columns]
        nullable = [False, *self.nullable]
        return [
            (col, None if value is None else self._bind(col, value), null)
            for col, value, null in zip(columns, values, nullable, strict=True)
        ]

    @staticmethod
    def _greater(parts: Sequence[tuple[sa.ColumnElement[Any], Any, bool]]) -> sa.ColumnElement[bool]:
        terms: list[sa.ColumnElement[bool]] = []
        equal: list[sa.ColumnElement[bool]] = []
        for col, bound, nullable in parts:
            if bound is None:  # nothing sorts after NULL: NULLs come last
                equal.append(col.is_(None))
                continue
            greater = sa.or_(col > bound, col.is_(None)) if nullable else col > bound
            terms.append(sa.and_(*equal, greater))
            equal.append(sa.and_(col.is_not(None), col == bound) if nullable else col == bound)
        return sa.or_(*terms) if terms else sa.false()

    def _bind(self, col: sa.ColumnElement[Any], value: Any) -> sa.BindParameter[Any]:
        kind: Any = sa.types.NullType() if self.raw_binds else col.type
        return sa.bindparam(None, value, type_=kind, unique=True)


def _free(name: str, taken: set[str]) -> str:
    while name in taken:
        name = f"_{name}"
    return name
