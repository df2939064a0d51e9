"""Polling reads at their boundaries, on the change source itself (no Spark), on SQLite,
PostgreSQL and MariaDB: ties larger than a batch, ties across a batch cut, composite keys under a
collation Python does not share (ICU, ``utf8mb4_unicode_ci``), NULL key parts, late commits in the
overlap window, and offsets written before cursors existed."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from sparkindex.capture.source import open_change_source
from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.documents.versions import external_version
from sparkindex.sources.change_source import ChangeSource, WatchedTable
from sparkindex.sources.registry import open_source
from tests.capture.helpers import HOSTILE
from tests.e2e.shop import fresh_database

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = dt.datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=dt.UTC)
ROWS = 130
LIMIT = 50

KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]
COLUMNS = ["version", "updated_at"]


def _code(i: int) -> str:
    """Keys whose database order is not Python's: case, accents, punctuation an ICU collation
    ignores at first level, the composite id's separator, emoji; unique even under ``_ci``."""
    return f"{['a', 'B', 'c', 'É'][i % 4]}{HOSTILE[i % len(HOSTILE)]}{i}"


@dataclass
class Db:
    kind: str
    url: str
    engine: sa.Engine
    items: sa.Table
    notes: sa.Table

    def run(self, *statements: Any) -> None:
        with self.engine.begin() as conn:  # one transaction: one commit for the whole tie
            for stmt in statements:
                conn.execute(stmt)


def _when(kind: str, value: dt.datetime) -> dt.datetime:
    return value if kind == "postgres" else value.replace(tzinfo=None)


def _datetime(kind: str) -> Any:
    """With time zone on PostgreSQL; with microseconds on MariaDB (its default has none)."""
    return sa.DateTime(timezone=kind == "postgres").with_variant(mysql.DATETIME(fsp=6), "mysql")


@pytest.fixture(params=KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    kind = request.param
    name = f"poll_{uuid.uuid4().hex[:10]}"
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'poll.db'}"
    else:
        url = fresh_database(request.getfixturevalue("services")[kind], name)
    engine = sa.create_engine(normalize_url(url))
    if kind == "postgres":  # a session zone that is not UTC: bounds must not depend on it
        with engine.connect() as conn:
            conn.exec_driver_sql(f"ALTER DATABASE {name} SET timezone = 'America/New_York'")
            conn.commit()
        engine.dispose()
    meta = sa.MetaData()
    collation = {"postgres": "und-x-icu", "mysql": "utf8mb4_unicode_ci"}.get(kind)
    options = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_unicode_ci"} if kind == "mysql" else {}
    items = sa.Table(
        "items",
        meta,
        sa.Column("code", sa.String(80, collation=collation), primary_key=True),
        sa.Column("n", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", _datetime(kind), nullable=False),
        **options,
    )
    notes = sa.Table(  # no key at all: rows are told apart by every column, NULLs included
        "notes",
        meta,
        sa.Column("item_code", sa.String(80, collation=collation), nullable=True),
        sa.Column("body", sa.String(80, collation=collation), nullable=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", _datetime(kind), nullable=False),
        **options,
    )
    meta.create_all(engine)
    rows = [
        {"code": _code(i), "n": i % 3, "name": f"item {i}", "version": 1, "updated_at": _when(kind, T0)}
        for i in range(ROWS + 20)
    ]
    notes_rows = [
        {
            "item_code": None if i % 3 == 0 else _code(i),
            "body": None if i % 5 == 0 and i % 3 else f"{HOSTILE[i % 7]}{i}",
        }
        for i in range(ROWS)
    ]
    with engine.begin() as conn:
        conn.execute(items.insert(), rows)
        conn.execute(notes.insert(), [{**r, "version": 1, "updated_at": _when(kind, T0)} for r in notes_rows])
    yield Db(kind, url, engine, items, notes)
    engine.dispose()
    if kind != "sqlite":
        admin = sa.create_engine(normalize_url(request.getfixturevalue("services")[kind]), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}" + (" WITH (FORCE)" if kind == "postgres" else ""))
        admin.dispose()


def _source(db: Db, tmp_path: Path, changes: str, tables: tuple[str, ...] = ("items",)) -> ChangeSource:
    text = (
        f"source:\n  url: {db.url}\n"
        f"coordination:\n  url: sqlite:///{tmp_path / 'state.db'}\n"
        f"target:\n  url: tantivy://{tmp_path / 'index'}\n"
        f"indexes:\n  - alias: items\n    table: items\n    changes: {changes}\n"
    )
    (tmp_path / "pipeline.yaml").write_text(text, encoding="utf-8")
    pipeline = load_pipeline(tmp_path / "pipeline.yaml")
    source = open_source(pipeline.source_url())
    watched = [WatchedTable(t, [], f"test {t}") for t in tables]
    changes_source = open_change_source(pipeline, source, watched, "test")
    changes_source.check()
    return changes_source


def _number(value: dt.datetime | int) -> int:
    result = external_version("x", "c", value)
    assert isinstance(result, int)
    return result


def _drain(
    changes: ChangeSource, start: dict[str, Any], limit: int, until: dict[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any], list[Any]]:
    """Read batch after batch until a read brings nothing: (changes, end offset, batches).
    Bounded: a source that never stops moving fails the test instead of hanging it."""
    out: list[Any] = []
    batches: list[Any] = []
    at = start
    for _ in range(100):
        batch = changes.read(at, limit, until)
        rows = [c for c in batch.changes if c.op != "recheck"]
        if not rows and batch.offset == at:
            return out, at, batches
        assert batch.offset != at, "a batch with changes must move the offset (Spark sees no new data otherwise)"
        assert changes.position(batch.offset) >= changes.position(at), "positions never go back"
        assert len(rows) <= limit
        out.extend(rows)
        batches.append(batch)
        at = batch.offset
    raise AssertionError("the reads never came to an end (livelock)")


def _keys(found: list[Any]) -> list[tuple[str, int]]:
    return [(c.new["code"], c.new["n"]) for c in found]


@pytest.mark.parametrize("column", COLUMNS)
def test_a_tie_larger_than_a_batch_is_walked_exactly_once(db: Db, tmp_path: Path, column: str) -> None:
    """130 rows get one new value in one transaction, read 50 at a time: every row exactly once,
    in three batches that each move the offset; inside the tie the position stays below its value
    (so offsets compare as their progress), and each change is versioned at the row's value."""
    changes = _source(db, tmp_path, f"{{column: {column}, overlap_s: 5, key_diff_every_s: 3600}}")
    _, at, _ = _drain(changes, changes.start(), 1000)  # the head's overlap re-reads what is there
    new = 7 if column == "version" else _when(db.kind, T1)
    tied = [_code(i) for i in range(ROWS)]
    db.run(db.items.update().where(db.items.c.code.in_(tied)).values({column: new, "name": db.items.c.name + " v2"}))
    head = changes.head()
    found, end, batches = _drain(changes, at, LIMIT, head)
    value = _number(7 if column == "version" else T1)
    assert sorted(_keys(found)) == sorted((_code(i), i % 3) for i in range(ROWS))
    assert len(batches) == 3
    assert [b.position for b in batches] == [value - 1, value - 1, value]
    assert {c.position for c in found} == {value}
    assert changes.position(end) == value == changes.position(head)
    assert not changes.pending(end, head) and not changes.pending(end)
    # read without an end, as a live sync does: the same rows
    again, _, _ = _drain(changes, at, LIMIT)
    assert sorted(_keys(again)) == sorted(_keys(found))


@pytest.mark.parametrize("column", COLUMNS)
def test_a_tie_across_a_batch_cut_loses_nothing(db: Db, tmp_path: Path, column: str) -> None:
    """40 rows at one value and 30 at the next, read 50 at a time: the cut falls inside the
    second tie, and its other 20 rows come in the next batch."""
    changes = _source(db, tmp_path, f"{{column: {column}, overlap_s: 5, key_diff_every_s: 3600}}")
    _, at, _ = _drain(changes, changes.start(), 1000)
    first = [_code(i) for i in range(40)]
    second = [_code(i) for i in range(40, 70)]
    v1, v2 = (2, 3) if column == "version" else (_when(db.kind, T1), _when(db.kind, T1 + dt.timedelta(seconds=1)))
    db.run(db.items.update().where(db.items.c.code.in_(first)).values({column: v1}))
    db.run(db.items.update().where(db.items.c.code.in_(second)).values({column: v2}))
    found, _, batches = _drain(changes, at, LIMIT)
    assert sorted(c for c, _ in _keys(found)) == sorted(first + second)
    assert len(batches) == 2
    assert (
        changes.position(batches[0].offset) == _number(3 if column == "version" else T1 + dt.timedelta(seconds=1)) - 1
    )


def test_a_table_without_a_key_is_walked_by_every_column_nulls_included(db: Db, tmp_path: Path) -> None:
    changes = _source(db, tmp_path, "{column: version, key_diff_every_s: 3600}", ("items", "notes"))
    _, at, _ = _drain(changes, changes.start(), 1000)
    db.run(db.notes.update().values(version=4))
    found, _, batches = _drain(changes, at, 40)
    assert len(batches) == 4
    got = sorted(((c.new["item_code"] or ""), (c.new["body"] or "")) for c in found)
    with db.engine.connect() as conn:
        want = sorted(
            ((r[0] or ""), (r[1] or "")) for r in conn.execute(sa.select(db.notes.c.item_code, db.notes.c.body))
        )
    assert got == want and len(got) == ROWS


def test_late_commits_behind_the_cursor_are_found_exactly_once(db: Db, tmp_path: Path) -> None:
    """A row that commits with a value the cursor passed already (inside a tie, and just below
    it): the overlap window finds it once more, at the batch's start position plus one."""
    changes = _source(db, tmp_path, "{column: updated_at, overlap_s: 600, key_diff_every_s: 3600}")
    _, at, _ = _drain(changes, changes.start(), 1000)
    tied = [_code(i) for i in range(ROWS)]
    db.run(db.items.update().where(db.items.c.code.in_(tied)).values(updated_at=_when(db.kind, T1)))
    found, at, _ = _drain(changes, at, LIMIT)
    assert len(found) == ROWS
    late = [_code(ROWS), _code(ROWS + 1)]
    db.run(
        db.items.update().where(db.items.c.code == late[0]).values(updated_at=_when(db.kind, T1), name="late tie"),
        db.items.update()
        .where(db.items.c.code == late[1])
        .values(updated_at=_when(db.kind, T1 - dt.timedelta(seconds=3)), name="late below"),
    )
    batch = changes.read(at, LIMIT)
    assert sorted(c.new["code"] for c in batch.changes) == sorted(late)
    assert {c.position for c in batch.changes} == {changes.position(at) + 1}
    assert _drain(changes, batch.offset, LIMIT)[0] == []


@pytest.mark.parametrize("column", COLUMNS)
def test_an_offset_written_before_cursors_resumes(db: Db, tmp_path: Path, column: str) -> None:
    """``{"ts", "w", "d"}`` (no cursors): the old reader cut ties at ``ts`` and kept only what lay
    above. Resumed, the rows at ``ts`` come again, except those its window names."""
    changes = _source(db, tmp_path, f"{{column: {column}, overlap_s: 600, key_diff_every_s: 3600}}")
    _, at, _ = _drain(changes, changes.start(), 1000)
    new = 9 if column == "version" else _when(db.kind, T1)
    db.run(db.items.update().where(db.items.c.code.in_([_code(i) for i in range(ROWS)])).values({column: new}))
    whole = changes.read(at, 1000)
    value = _number(9 if column == "version" else T1)
    window = whole.offset["w"]  # what the old reader's window held for these rows (same digests)
    assert len(window) == (ROWS if column == "updated_at" else 0)
    found, end, _ = _drain(changes, {"ts": value, "w": [], "d": 0}, LIMIT)
    assert sorted(_keys(found)) == sorted((_code(i), i % 3) for i in range(ROWS))
    assert {c.position for c in found} == {value + 1}  # never below what the old reader versioned them
    assert changes.position(end) == value
    if column == "updated_at":  # the rows the old window names were delivered: not again
        assert _drain(changes, {"ts": value, "w": window, "d": 0}, LIMIT)[0] == []


def test_tables_polled_by_columns_of_different_scales_resume_on_their_own(db: Db, tmp_path: Path) -> None:
    """items by a timestamp (microseconds since 1970), notes by a small integer version: neither
    resumes from the other's value (read from one shared position, every notes change was lost)."""
    changes = _source(
        db,
        tmp_path,
        "{column: updated_at, tables: {notes: version}, overlap_s: 5, key_diff_every_s: 3600}",
        ("items", "notes"),
    )
    _, at, _ = _drain(changes, changes.start(), 1000)
    db.run(db.notes.update().where(db.notes.c.item_code == _code(1)).values(version=2, body="moved"))
    db.run(db.items.update().where(db.items.c.code == _code(2)).values(updated_at=_when(db.kind, T1), name="moved"))
    found, end, _ = _drain(changes, at, LIMIT)
    got = sorted((c.table, c.new.get("code") or c.new.get("item_code")) for c in found)
    assert got == [("items", _code(2)), ("notes", _code(1))]
    assert changes.position(end) == _number(T1)
    assert _drain(changes, end, LIMIT)[0] == []
