"""Change capture for any database (SQLite included): polling a monotone column.

Each watched table is read for rows whose column (``indexes[].changes.column``, or a per-table
override) moved past the last position, minus an overlap window (``overlap_s``) for transactions
that wrote an older value but committed after the last poll. The offset remembers the rows seen
inside that window, so a late commit is found exactly once more and a quiet table yields nothing.

Deletes leave no row to poll. A tombstone table (``changes.tombstones``: columns ``tbl``, the
table's name, ``row_key``, the deleted row's key and link columns as a JSON object, and the
polling column) is read like the others; without one, every ``key_diff_every_s`` the index's
documents are compared with the root table's keys, one sort-key range per Spark task, and the
documents without a row are deleted (a deleted child row shows only when its parent's column moves).

Positions are the column's values as external versions (integers as they are, date/times in
microseconds); a row found late gets the batch's start position plus one, so it still wins over
what was written before it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.changes.model import Batch, Change, recheck
from sparkindex.changes.source import ChangeSource, Lag
from sparkindex.documents.plan import check_version_column
from sparkindex.documents.versions import external_version
from sparkindex.errors import ConfigError

log = logging.getLogger(__name__)


class PollingChangeSource(ChangeSource):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        configs = [idx.changes for idx in self.pipeline.indexes if idx.changes is not None]
        if not configs:
            raise ConfigError(
                f"{self.pipeline.origin}: indexes[].changes: polling change capture needs a monotone column, "
                "e.g. changes: {column: updated_at}"
            )
        self.config = configs[0]
        self._next_diff = 0.0  # the first read diffs: deletes made while no sync ran are found at once
        self._first_batch_needed: bool | None = None
        self._root = self.pipeline.indexes[0]

    @property
    def first_batch_needed(self) -> bool:
        """The stream's first read diffs the keys of every index that exists."""
        if self._first_batch_needed is None:
            from sparkindex.targets.registry import open_target

            target = open_target(self.pipeline.target.url, self.pipeline.base_dir, self.pipeline.target.options)
            try:
                built = any(target.alias_target(idx.alias) is not None for idx in self.pipeline.indexes)
            finally:
                target.close()
            self._first_batch_needed = self.config.tombstones is None and built
        return self._first_batch_needed

    def _column(self, table: str) -> str:
        return self.config.tables.get(table, self.config.column)

    def _overlap(self, table: str) -> int:
        col = self.source.table(table).columns[self._column(table)]
        is_time = isinstance(col.type, sa.DateTime | sa.Date)
        return round(self.config.overlap_s * 1_000_000) if is_time else 0

    def check(self) -> None:
        for t in self.tables:
            info = self.source.table(t.name, t.where)
            check_version_column(info, self._column(t.name), f"{t.where}: changes.column")
        if self.config.tombstones is not None:
            tomb = self.source.table(self.config.tombstones, "changes.tombstones")
            tomb.require_columns(["tbl", "row_key", self.config.column], "changes.tombstones")

    def position(self, offset: Mapping[str, Any]) -> int:
        return int(offset.get("ts", 0))

    def start(self) -> dict[str, Any]:
        return self.head()

    def head(self) -> dict[str, Any]:
        top = 0
        for t in self._tables():
            info = self.source.table(t)
            col = info.table.c[self._column(t)]
            with self.source.connect(f"the newest {col.name} of {t!r}") as conn:
                value = conn.execute(sa.select(sa.func.max(col))).scalar()
            top = max(top, self._number(t, value))
        return {"ts": top, "w": [], "d": 0}

    def _tables(self) -> list[str]:
        names = [t.name for t in self.tables]
        return [*names, self.config.tombstones] if self.config.tombstones else names

    def _number(self, table: str, value: Any) -> int:
        if value is None:
            return 0
        if isinstance(value, str):  # SQLite keeps date/times as text
            value = dt.datetime.fromisoformat(value)
        result = external_version(table, self._column(table), value)
        return 0 if isinstance(result, Exception) else result

    def read(self, start: Mapping[str, Any], limit: int, until: Mapping[str, Any] | None = None) -> Batch:
        after = self.position(start)
        seen = {tuple(w) for w in start.get("w", [])}
        upto = None if until is None else self.position(until)
        found: list[tuple[str, dict[str, Any], int, list[Any]]] = []
        for table in self._tables():
            for _, row, value in self._poll(table, after, upto, limit + len(seen)):
                found.append((table, row, value, [table, _digest(row), value]))
        found.sort(key=lambda f: f[2])
        fresh = [f for f in found if tuple(f[3]) not in seen][:limit]
        top = max([after, *(f[2] for f in fresh)])
        # rows inside the overlap window are remembered, so that only late commits come again
        taken = {id(f) for f in fresh}
        kept = [f[3] for f in found if tuple(f[3]) in seen or id(f) in taken]
        window = sorted(m for m in kept if m[2] > top - self._overlap(m[0]))
        changes = [self._change(table, row, max(value, after + 1)) for table, row, value, _ in fresh]
        gone = self._key_diff(after)
        changes.extend(gone)
        if not changes:
            return Batch([], dict(start), after)
        # a batch of deletes alone must still move the offset, or Spark would see no new data
        diffs = int(start.get("d", 0)) + (1 if gone else 0)
        return Batch(changes, {"ts": top, "w": window, "d": diffs}, top, time.time(), more=len(fresh) >= limit)

    def _poll(self, table: str, after: int, upto: int | None, limit: int) -> list[tuple[str, dict[str, Any], int]]:
        info = self.source.table(table)
        col = info.table.c[self._column(table)]
        since = after - self._overlap(table)
        stmt = sa.select(info.table).order_by(col).limit(limit)
        if since > 0:
            stmt = stmt.where(col >= _value_of(col, since))
        with self.source.connect(f"changed rows of {table!r}") as conn:
            rows = [dict(r._mapping) for r in conn.execute(stmt)]
        out = []
        for row in rows:
            value = self._number(table, row[col.name])
            if upto is not None and value > upto:
                break
            if value > since:
                out.append((table, row, value))
        return out

    def _change(self, table: str, row: dict[str, Any], position: int) -> Change:
        if table == self.config.tombstones:
            key = orjson.loads(row["row_key"])
            return Change(str(row["tbl"]), "delete", position, old=key if isinstance(key, dict) else None)
        return Change(table, "update", position, None, _plain(row))

    def _key_diff(self, after: int) -> list[Change]:
        """Without tombstones, now and then: one recheck per sort-key range of every index (about
        ``key_diff_range_docs`` documents each). The apply step runs each range as a Spark task of
        its own and deletes the documents whose root row is gone (:mod:`sparkindex.changes.apply`)."""
        if self.config.tombstones is not None or self.probing or time.monotonic() < self._next_diff:
            return []
        self._next_diff = time.monotonic() + self.config.key_diff_every_s
        from sparkindex.changes.ranges import index_ranges

        per_range = self.config.key_diff_range_docs
        return [
            recheck(idx.table, idx.alias, lo, hi, after + 1)
            for idx, lo, hi in index_ranges(self.pipeline, lambda _idx: per_range)
        ]

    def lag(self, offset: Mapping[str, Any]) -> Lag:
        head = self.position(self.head())
        behind = max(0, head - self.position(offset))
        return Lag(None, behind / 1e6 if behind > 1e12 else 0.0)


def _digest(row: Mapping[str, Any]) -> str:
    return hashlib.sha1(orjson.dumps(_plain(row), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(dict(row), default=str, option=orjson.OPT_NON_STR_KEYS))  # type: ignore[no-any-return]


def _value_of(col: sa.ColumnElement[Any], micros: int) -> Any:
    if isinstance(col.type, sa.DateTime | sa.Date):
        value = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
        return value if isinstance(col.type, sa.DateTime) else value.date()
    return micros
