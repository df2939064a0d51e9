"""Change capture for any database (SQLite included): polling a monotone column.

Each watched table is read in (column, row key) order from just after the last row it delivered
(:mod:`.polling_cursor`), so rows that share a value are never cut apart by a batch boundary and a
tie larger than a batch (one ``UPDATE … SET updated_at = now()``) is walked across batches. Each
table resumes on its own, never from another table's value (tables may be polled by columns of
different scales). The column, the overlap window and the deletes of each table come from the
``changes:`` of the indexes whose relation tree names it (:mod:`.polling_config`).

A transaction that wrote an older value but committed after the poll that passed it lands behind
the cursor. For date/time columns the rows behind it within ``overlap_s`` below the newest
date/time read (the database's clock, as far as polling sees it) are read again; the offset
remembers the rows delivered there (its window), so a late commit is found exactly once more and
a quiet table yields nothing. An integer row version has no window: it must be assigned in commit
order (a commit-time counter), or a late commit behind the cursor is missed.

Deletes leave no row to poll. A tombstone table (``changes.tombstones``: columns ``tbl``, the
table's name, ``row_key``, the deleted row's key and link columns as a JSON object, and the
polling column) is read like the others; without one, every ``key_diff_every_s`` the index's
documents are compared with the root table's keys, one sort-key range per Spark task, and the
documents without a row are deleted (a deleted child row shows only when its parent's column moves).

Positions are the column's values as external versions (integers as they are, date/times in
microseconds). An offset's position is the value at and below which every row was delivered:
inside a tie it stays one below the tie's value until the tie is done, so offsets compare as their
progress does (a consumer group resumes from the one furthest behind, ``--until-caught-up`` keeps
reading) and no change is versioned above its row's value. A change's position is never below
the batch's start plus one (a row found late gets exactly that), so it still wins over what was
written before it, and over what an earlier batch wrote for the same row.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.capture.polling_config import plan_polling
from sparkindex.capture.polling_cursor import Keyset, PollOffset, cursor_key, decode
from sparkindex.documents.key_rules import check_version_column
from sparkindex.documents.versions import external_version
from sparkindex.sources.change_model import Batch, Change, recheck
from sparkindex.sources.change_source import ChangeSource, Lag

log = logging.getLogger(__name__)

WindowId = tuple[str, str, int]


@dataclass(frozen=True)
class _Row:
    table: str
    row: dict[str, Any]
    number: int  # the column's value as a position
    cursor: list[Any]  # where the table's next read resumes once this row is delivered
    wid: WindowId  # (table, digest, number): how the window names it


@dataclass(frozen=True)
class _Forward:
    taken: list[_Row]
    #: per table, the position of its first row left for a later batch (read but not taken)
    heads: dict[str, int]
    more: bool


class PollingChangeSource(ChangeSource):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan_polling(self.pipeline)
        #: per alias, when its next key diff is due; none yet: the first read diffs, so deletes
        #: made while no sync ran are found at once
        self._next_diff: dict[str, float] = {}
        self._first_batch_needed: bool | None = None
        self._keysets: dict[str, Keyset] = {}

    @property
    def first_batch_needed(self) -> bool:
        """The stream's first read diffs the keys of every index that exists and has no tombstones."""
        if self._first_batch_needed is None:
            from sparkindex.resources import open_target

            with open_target(self.pipeline) as target:
                self._first_batch_needed = any(
                    target.alias_target(idx.alias) is not None for idx in self._diffed(self.pipeline.indexes)
                )
        return self._first_batch_needed

    def _diffed(self, indexes: list[Any]) -> list[Any]:
        return [idx for idx in indexes if self.plan.configs[idx.alias].tombstones is None]

    def _column(self, table: str) -> str:
        return self.plan.column(table)

    def _overlap(self, table: str) -> int:
        col = self.source.table(table).columns[self._column(table)]
        is_time = isinstance(col.type, sa.DateTime | sa.Date)
        return round(self.plan.overlap_s(table) * 1_000_000) if is_time else 0

    def _where(self, table: str) -> str:
        found = self.plan.tables.get(table)
        return f"{self.pipeline.origin}: {found.where if found is not None else 'indexes[].changes'}"

    def check(self) -> None:
        for t in self.tables:
            info = self.source.table(t.name, t.where)
            check_version_column(info, self._column(t.name), f"{self._where(t.name)}.column")
        for tomb in self.plan.tombstones:
            info = self.source.table(tomb, f"{self._where(tomb)}.tombstones")
            info.require_columns(["tbl", "row_key", self._column(tomb)], f"{self._where(tomb)}.tombstones")
        for table in self._tables():
            self._keyset(table)  # a table whose rows cannot be ordered is refused here

    def position(self, offset: Mapping[str, Any]) -> int:
        return int(offset.get("ts", 0))

    def start(self) -> dict[str, Any]:
        return self.head()

    def head(self) -> dict[str, Any]:
        """Every table's last row in keyset order as its cursor (an empty table: every row that
        comes is new); the position is the newest value of any of them."""
        top, cursors, floors = 0, {}, {}
        for t in self._tables():
            last = self._fetch(t, self._keyset(t).last())
            if last:
                cursors[t], top = last[0].cursor, max(top, last[0].number)
            else:
                floors[t] = -1
        return PollOffset(top, cursors, floors).dump()

    def _tables(self) -> list[str]:
        names = [t.name for t in self.tables]
        return [*names, *(t for t in self.plan.tombstones if t not in names)]

    def _keyset(self, table: str) -> Keyset:
        if table not in self._keysets:
            info = self.source.table(table)
            key = cursor_key(info, table in self.plan.tombstones)
            raw = self.source.dialect_name == "sqlite"
            self._keysets[table] = Keyset(info, self._column(table), key, raw)
        return self._keysets[table]

    def _number(self, table: str, value: Any) -> int:
        if value is None:
            return 0
        if isinstance(value, str):  # SQLite keeps date/times as text
            value = dt.datetime.fromisoformat(value)
        result = external_version(table, self._column(table), value)
        return 0 if isinstance(result, Exception) else result

    def read(self, start: Mapping[str, Any], limit: int, until: Mapping[str, Any] | None = None) -> Batch:
        at = PollOffset.load(start)
        end = None if until is None else PollOffset.load(until)
        tables = self._tables()
        # a cursor written for another column or key (the config changed) is not compared
        cursors = {t: at.cursors[t] for t in tables if self._keyset(t).usable(at.cursors.get(t))}
        floors = {t: at.floor(t) for t in tables if t not in cursors}
        seen = {_wid(w) for w in at.window}
        clock = self._clock(cursors, floors, at.ts)
        late, found, unsure = self._late(clock, cursors, floors, seen, tables, limit)
        fwd = self._forward(cursors, floors, end, tables, limit - len(late))
        gone = self._key_diff(at.ts)
        if not late and not fwd.taken and not gone:
            return Batch([], dict(start), at.ts)
        for r in fwd.taken:  # in order: each table's last row taken is where it resumes
            cursors[r.table] = r.cursor
            floors.pop(r.table, None)
        top = max([at.ts, *(r.number for r in fwd.taken)])
        # every row below the first one left behind is delivered: inside a tie, one below it
        position = top if not fwd.heads else max(at.ts, min(top, min(fwd.heads.values()) - 1))
        if end is not None:
            position = max(at.ts, min(position, end.ts))
        # the window keeps what it names at or past where a table's next read begins: unchecked
        # (an old offset's window names rows at its ts, ahead of its floor)
        begins = {t: self._frontier(t, cursors, floors) + (1 if t in floors else 0) for t in tables}
        kept = {w for w in seen if w in found or w[0] in unsure or w[2] >= begins.get(w[0], 0)}
        window = self._window(self._clock(cursors, floors, position), kept, [*late, *fwd.taken])
        changes = [self._change(r.table, r.row, at.ts + 1) for r in late]
        changes += [self._change(r.table, r.row, max(r.number, at.ts + 1)) for r in fwd.taken if r.wid not in seen]
        changes.extend(gone)
        # a batch of deletes alone must still move the offset, or Spark would see no new data
        offset = PollOffset(position, cursors, floors, window, at.diffs + (1 if gone else 0))
        more = fwd.more or bool(unsure) or len(late) >= limit
        return Batch(changes, offset.dump(), position, time.time(), more=more)

    def _frontier(self, table: str, cursors: dict[str, list[Any]], floors: dict[str, int]) -> int:
        """The position where *table* resumes: its cursor's value, or its floor."""
        return self._number(table, decode(cursors[table][1])) if table in cursors else floors[table]

    def _clock(self, cursors: dict[str, list[Any]], floors: dict[str, int], default: int) -> int:
        """The newest date/time any table has reached: late commits are those within the overlap
        below it (every table polled by a date/time column runs on the database's clock)."""
        times = [self._frontier(t, cursors, floors) for t in self._tables() if self._overlap(t) > 0]
        return max(times, default=default)

    def _late(
        self,
        clock: int,
        cursors: dict[str, list[Any]],
        floors: dict[str, int],
        seen: set[WindowId],
        tables: list[str],
        limit: int,
    ) -> tuple[list[_Row], set[WindowId], set[str]]:
        """Rows behind each table's cursor, within the overlap window below *clock*, that the
        window does not name: commits that became visible after the poll that passed their value.
        Returns them (oldest first, at most *limit*), the window's rows found again, and the
        tables whose read was cut short (their window cannot be pruned, and more may be late)."""
        candidates: list[tuple[int, int, _Row]] = []
        found: set[WindowId] = set()
        unsure: set[str] = set()
        for n, table in enumerate(tables):
            overlap = self._overlap(table)
            if overlap == 0:
                continue
            ks = self._keyset(table)
            lower = clock - overlap
            cursor = cursors.get(table)
            behind = ks.upto(cursor) if cursor is not None else ks.column <= _value_of(ks.column, floors[table])
            cap = sum(1 for w in seen if w[0] == table) + limit + 1
            rows = self._fetch(table, ks.select().where(ks.column > _value_of(ks.column, lower), behind).limit(cap))
            if len(rows) >= cap:
                unsure.add(table)
            for r in rows:
                if r.number <= lower:
                    continue
                if r.wid in seen:
                    found.add(r.wid)
                else:
                    candidates.append((r.number, n, r))
        candidates.sort(key=lambda c: (c[0], c[1]))
        return [c[2] for c in candidates[:limit]], found, unsure

    def _forward(
        self,
        cursors: dict[str, list[Any]],
        floors: dict[str, int],
        end: PollOffset | None,
        tables: list[str],
        budget: int,
    ) -> _Forward:
        """The next rows after each table's cursor (or floor), merged by position across tables,
        at most *budget*; none past *end* (exact where *end* has the table's cursor)."""
        if budget <= 0:
            return _Forward([], {}, True)
        ready: dict[str, list[_Row]] = {}
        heads: dict[str, int] = {}
        for table in tables:
            ks = self._keyset(table)
            cursor = cursors.get(table)
            stmt = ks.select().where(
                ks.after(cursor) if cursor is not None else ks.column > _value_of(ks.column, floors[table])
            )
            upto = None if end is None else end.cursors.get(table)
            if upto is not None and ks.usable(upto):
                stmt, upto_number = stmt.where(ks.upto(upto)), None
            else:
                upto_number = None if end is None else (end.floor(table) if table in end.floors else end.ts)
            rows = self._fetch(table, stmt.limit(budget + 1))
            past = next((i for i, r in enumerate(rows) if upto_number is not None and r.number > upto_number), None)
            if past is not None:  # the position must stay below a row it did not deliver
                rows, heads[table] = rows[:past], rows[past].number
            ready[table] = rows
        order = {t: n for n, t in enumerate(tables)}
        merged = heapq.merge(*ready.values(), key=lambda r: (r.number, order[r.table]))
        taken = list(itertools.islice(merged, budget))
        counts = {t: sum(1 for r in taken if r.table == t) for t in tables}
        more = False
        for table, rows in ready.items():
            if counts[table] < len(rows):
                heads[table] = rows[counts[table]].number
                more = True
        return _Forward(taken, heads, more)

    def _window(self, clock: int, kept: set[WindowId], delivered: list[_Row]) -> list[list[Any]]:
        """The rows the next read's overlap must not deliver again: those delivered, and those
        remembered before that are still there or were not looked for; each while it lies
        within the overlap below *clock*."""
        overlaps = {t: self._overlap(t) for t in self._tables()}
        names = kept | {r.wid for r in delivered}
        return sorted([list(w) for w in names if overlaps.get(w[0], 0) > 0 and w[2] > clock - overlaps[w[0]]])

    def _fetch(self, table: str, stmt: sa.Select[Any]) -> list[_Row]:
        ks = self._keyset(table)
        with self.source.connect(f"changed rows of {table!r}") as conn:
            pairs = [ks.split(r._mapping) for r in conn.execute(stmt)]
        out = []
        for row, cursor in pairs:
            number = self._number(table, row[ks.column.name])
            out.append(_Row(table, row, number, cursor, (table, _digest(row), number)))
        return out

    def _change(self, table: str, row: dict[str, Any], position: int) -> Change:
        if table in self.plan.tombstones:
            key = orjson.loads(row["row_key"])
            return Change(str(row["tbl"]), "delete", position, old=key if isinstance(key, dict) else None)
        return Change(table, "update", position, None, _plain(row))

    def _key_diff(self, after: int) -> list[Change]:
        """For the indexes without tombstones, each every ``key_diff_every_s`` of its own: one
        recheck per sort-key range (about ``key_diff_range_docs`` documents each). The apply step
        runs each range as a Spark task of its own and deletes the documents whose root row is
        gone (:mod:`sparkindex.capture.apply`)."""
        if self.probing:
            return []
        now = time.monotonic()
        due = [idx for idx in self._diffed(self.pipeline.indexes) if now >= self._next_diff.get(idx.alias, 0.0)]
        if not due:
            return []
        for idx in due:
            self._next_diff[idx.alias] = now + self.plan.configs[idx.alias].key_diff_every_s
        from sparkindex.capture.ranges import index_ranges

        scope = self.pipeline.model_copy(update={"indexes": due})
        return [
            recheck(idx.table, idx.alias, lo, hi, after + 1)
            for idx, lo, hi in index_ranges(scope, lambda i: self.plan.configs[i.alias].key_diff_range_docs)
        ]

    def lag(self, offset: Mapping[str, Any]) -> Lag:
        head = self.position(self.head())
        behind = max(0, head - self.position(offset))
        return Lag(None, behind / 1e6 if behind > 1e12 else 0.0)


def _wid(entry: list[Any]) -> WindowId:
    return (str(entry[0]), str(entry[1]), int(entry[2]))


def _digest(row: Mapping[str, Any]) -> str:
    return hashlib.sha1(orjson.dumps(_plain(row), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(dict(row), default=str, option=orjson.OPT_NON_STR_KEYS))  # type: ignore[no-any-return]


def _value_of(col: sa.ColumnElement[Any], number: int) -> Any:
    """A position as a value of *col*, for range bounds (a cursor compares exact values instead).
    Aware for a column with a time zone, so the server does not read it in the session's zone."""
    if isinstance(col.type, sa.DateTime | sa.Date):
        value = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=number)
        if isinstance(col.type, sa.DateTime):
            return value.replace(tzinfo=dt.UTC) if col.type.timezone else value
        return value.date()
    return number
