"""Change-capture state in the coordination store: consumer offsets, document versions, deferred
changes and sync holds.

The store is what every node reaches (the index-based-offsets seed keeps offsets where every
consumer can read them), so a sync that restarts on another machine resumes from the same place.
These tables are new and only added to a store (``create_all`` skips what exists); no existing
table changes, so the core schema's version is untouched.

* ``si_sync_offset``: per consumer group and alias, the last position whose changes the target
  acknowledged, the source's resume offset (JSON) and the physical index it was applied to.
* ``si_doc_version``: per physical index and document, the newest external version written, for
  targets that do not compare versions themselves (Tantivy); deletes keep theirs (a tombstone).
* ``si_change_snapshot``: deferred changes per alias, table and row key; a later change to the
  same row replaces the earlier one (search-center's delay effect), keeping every row image seen.
* ``si_sync_hold``, ``si_sync_presence``, ``si_reindex_handover``: how a reindex and the live
  syncs of its aliases take turns (holds with a lease, which sync serves which alias, the swap
  recorded before the hand-over); see :mod:`sparkindex.coordination.holds`.
* ``si_deferred_run``: per alias, when its last deferred refresh started, so a sync restarted
  after ``sync.deferred_at`` does not apply them a second time for that day's refresh.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.holds import Hold, HoldTables, Presence, SyncHolds, add_hold_tables
from sparkindex.coordination.tables import Time

__all__ = ["ConsumerOffsets", "DeferredChange", "GroupOffset", "Hold", "OffsetStore", "Presence", "make_offset_tables"]

#: Versions are looked up and replaced in chunks of this many ids (bind-parameter limits).
CHUNK = 500


@dataclass(frozen=True)
class OffsetTables:
    metadata: sa.MetaData
    offset: sa.Table
    doc_version: sa.Table
    snapshot: sa.Table
    deferred_run: sa.Table
    holds: HoldTables  # holds, sync presence, reindex hand-overs (coordination/holds.py)


def make_offset_tables(prefix: str = "") -> OffsetTables:
    md = sa.MetaData()
    p = f"{prefix}si_"
    offset = sa.Table(
        f"{p}sync_offset",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("offset_json", sa.Text, nullable=False),
        sa.Column("index_name", sa.String(255)),
        sa.Column("applied", sa.BigInteger, nullable=False, default=0),
        sa.Column("deleted", sa.BigInteger, nullable=False, default=0),
        sa.Column("lag_s", sa.Float, nullable=False, default=0.0),
        sa.Column("updated_at", Time, nullable=False),
        #: log the source retains for the group (a PostgreSQL slot's WAL), as last measured
        sa.Column("retained_bytes", sa.BigInteger),
    )
    doc_version = sa.Table(
        f"{p}doc_version",
        md,
        sa.Column("index_name", sa.String(255), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", Time, nullable=False),
    )
    snapshot = sa.Table(
        f"{p}change_snapshot",
        md,
        # 128 + 128 + 512 characters: MariaDB's 3,072-byte key limit in utf8mb4 (4 bytes each)
        sa.Column("alias", sa.String(128), primary_key=True),
        sa.Column("tbl", sa.String(128), primary_key=True),
        sa.Column("row_key", sa.String(512), primary_key=True),
        sa.Column("images", sa.Text, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("recorded_at", Time, nullable=False),
    )
    deferred_run = sa.Table(
        f"{p}deferred_run",
        md,
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("started_at", Time, nullable=False),
    )
    return OffsetTables(md, offset, doc_version, snapshot, deferred_run, add_hold_tables(md, prefix))


@dataclass(frozen=True)
class GroupOffset:
    group: str
    alias: str
    position: int
    offset: dict[str, Any]
    index: str | None
    applied: int
    deleted: int
    lag_s: float
    updated_at: float


class ConsumerOffsets(Protocol):
    """Where consumer groups keep their acknowledged positions (``sync.offsets``): the
    coordination store (:class:`OffsetStore`, one transaction per acknowledgement) or an index of
    the target (:mod:`sparkindex.targets.search_engine.offsets`). Holds, versions and deferred
    changes stay in the coordination store either way."""

    def offsets(self, group: str) -> dict[str, GroupOffset]:
        """The group's offset per alias."""
        ...

    def groups_of(self, alias: str) -> list[GroupOffset]:
        """Every group's offset for *alias*."""
        ...

    def save(
        self,
        group: str,
        positions: Mapping[str, tuple[int, dict[str, Any], str | None]],
        counts: Mapping[str, tuple[int, int]] | None = None,
        lag_s: float = 0.0,
        retained_bytes: int | None = None,
    ) -> None:
        """Record, per alias, the acknowledged (position, resume offset, index); add *counts*."""
        ...

    def forget(self, group: str, aliases: Sequence[str] | None = None) -> None: ...

    def every_group(self) -> list[GroupOffset]:
        """Every group's offset for every alias (what the progress page and metrics show)."""
        ...


@dataclass(frozen=True)
class DeferredChange:
    alias: str
    table: str
    row_key: str
    images: list[dict[str, Any]]
    position: int


class OffsetStore(SyncHolds):
    def __init__(self, engine: Engine, prefix: str = "") -> None:
        self.engine = engine
        self.t = make_offset_tables(prefix)
        self.h = self.t.holds
        self.t.metadata.create_all(engine, checkfirst=True)
        _add_missing_columns(engine, self.t.offset)
        _add_missing_columns(engine, self.h.hold)  # expires_at: holds have a lease

    # -- consumer offsets --------------------------------------------------------------------------
    @rerun_on_conflict
    def offsets(self, group: str) -> dict[str, GroupOffset]:
        t = self.t.offset
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.group_name == group)).fetchall()
        return {r.alias: _offset(r) for r in rows}

    @rerun_on_conflict
    def every_group(self) -> list[GroupOffset]:
        with self.engine.connect() as conn:
            return [_offset(r) for r in conn.execute(sa.select(self.t.offset)).fetchall()]

    @rerun_on_conflict
    def groups_of(self, alias: str) -> list[GroupOffset]:
        t = self.t.offset
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.alias == alias)).fetchall()
        return [_offset(r) for r in rows]

    @rerun_on_conflict
    def save(
        self,
        group: str,
        positions: Mapping[str, tuple[int, dict[str, Any], str | None]],
        counts: Mapping[str, tuple[int, int]] | None = None,
        lag_s: float = 0.0,
        retained_bytes: int | None = None,
    ) -> None:
        """Record, per alias, the acknowledged (position, resume offset, index) in one transaction;
        *counts* (applied, deleted) are added to the running totals."""
        t = self.t.offset
        now = time.time()
        with self.engine.begin() as conn:
            for alias, (position, offset, index) in positions.items():
                applied, deleted = (counts or {}).get(alias, (0, 0))
                values: dict[str, Any] = {
                    "position": position,
                    "offset_json": orjson.dumps(offset).decode(),
                    "index_name": index,
                    "lag_s": lag_s,
                    "updated_at": now,
                    "retained_bytes": retained_bytes,
                }
                res = conn.execute(
                    t.update()
                    .where(t.c.group_name == group, t.c.alias == alias)
                    .values(applied=t.c.applied + applied, deleted=t.c.deleted + deleted, **values)
                )
                if res.rowcount == 0:
                    conn.execute(
                        t.insert().values(group_name=group, alias=alias, applied=applied, deleted=deleted, **values)
                    )

    @rerun_on_conflict
    def forget(self, group: str, aliases: Sequence[str] | None = None) -> None:
        t = self.t.offset
        cond = t.c.group_name == group
        if aliases is not None:
            cond = sa.and_(cond, t.c.alias.in_(list(aliases)))
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(cond))

    # -- document versions (targets without external versions) --------------------------------------
    @rerun_on_conflict
    def versions(self, index: str, doc_ids: Sequence[str]) -> dict[str, int]:
        t = self.t.doc_version
        out: dict[str, int] = {}
        unique = list(dict.fromkeys(doc_ids))
        with self.engine.connect() as conn:
            for i in range(0, len(unique), CHUNK):
                chunk = unique[i : i + CHUNK]
                stmt = sa.select(t.c.doc_id, t.c.version).where(t.c.index_name == index, t.c.doc_id.in_(chunk))
                out.update({r.doc_id: int(r.version) for r in conn.execute(stmt)})
        return out

    @rerun_on_conflict
    def record_versions(self, index: str, versions: Mapping[str, int]) -> None:
        """Replace the versions of these documents (delete + insert: portable, two statements per chunk)."""
        t = self.t.doc_version
        now = time.time()
        items = list(versions.items())
        with self.engine.begin() as conn:
            for i in range(0, len(items), CHUNK):
                chunk = items[i : i + CHUNK]
                conn.execute(t.delete().where(t.c.index_name == index, t.c.doc_id.in_([d for d, _ in chunk])))
                conn.execute(
                    t.insert(), [{"index_name": index, "doc_id": d, "version": v, "updated_at": now} for d, v in chunk]
                )

    @rerun_on_conflict
    def drop_versions(self, index: str) -> None:
        t = self.t.doc_version
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.index_name == index))

    # -- deferred changes ----------------------------------------------------------------------------
    @rerun_on_conflict
    def defer(self, alias: str, changes: Sequence[tuple[str, str, list[dict[str, Any]], int]]) -> None:
        """Record (table, row key, row images, position); a later change to a row replaces the
        earlier one but keeps its images, so a parent the row left is rebuilt too."""
        t = self.t.snapshot
        now = time.time()
        with self.engine.begin() as conn:
            for table, row_key, images, position in changes:
                cond = sa.and_(t.c.alias == alias, t.c.tbl == table, t.c.row_key == row_key)
                row = conn.execute(sa.select(t.c.images, t.c.position).where(cond)).first()
                if row is None:
                    conn.execute(
                        t.insert().values(
                            alias=alias,
                            tbl=table,
                            row_key=row_key,
                            images=_images(images),
                            position=position,
                            recorded_at=now,
                        )
                    )
                    continue
                merged = [*orjson.loads(row.images), *images]
                conn.execute(
                    t.update()
                    .where(cond)
                    .values(images=_images(merged), position=max(int(row.position), position), recorded_at=now)
                )

    @rerun_on_conflict
    def deferred(self, alias: str) -> list[DeferredChange]:
        t = self.t.snapshot
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.alias == alias).order_by(t.c.tbl, t.c.row_key)).fetchall()
        return [DeferredChange(r.alias, r.tbl, r.row_key, orjson.loads(r.images), int(r.position)) for r in rows]

    @rerun_on_conflict
    def clear_deferred(self, alias: str, done: Sequence[DeferredChange]) -> int:
        """Remove applied records unless a newer change replaced them meanwhile."""
        t = self.t.snapshot
        removed = 0
        with self.engine.begin() as conn:
            for d in done:
                res = conn.execute(
                    t.delete().where(
                        t.c.alias == alias, t.c.tbl == d.table, t.c.row_key == d.row_key, t.c.position == d.position
                    )
                )
                removed += res.rowcount
        return removed

    @rerun_on_conflict
    def record_deferred_run(self, aliases: Sequence[str], started_at: float) -> None:
        t = self.t.deferred_run
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.alias.in_(list(aliases))))
            conn.execute(t.insert(), [{"alias": a, "started_at": started_at} for a in aliases])

    @rerun_on_conflict
    def last_deferred_run(self, aliases: Sequence[str]) -> float | None:
        """When the last deferred refresh of all *aliases* started (the earliest of their starts,
        epoch s), None if some alias never had one."""
        t = self.t.deferred_run
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.alias, t.c.started_at).where(t.c.alias.in_(list(aliases)))).fetchall()
        starts = {r.alias: float(r.started_at) for r in rows}
        if not aliases or any(a not in starts for a in aliases):
            return None
        return min(starts.values())


def _add_missing_columns(engine: Engine, table: sa.Table) -> None:
    """Columns added to these tables after a store created them (``create_all`` skips a table
    that exists): added, nullable, by whichever process comes first."""
    present = {c["name"] for c in sa.inspect(engine).get_columns(table.name)}
    for column in table.columns:
        if column.name in present or not column.nullable:
            continue
        kind = column.type.compile(dialect=engine.dialect)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))
        except sa.exc.DBAPIError:  # another process added it meanwhile
            if column.name not in {c["name"] for c in sa.inspect(engine).get_columns(table.name)}:
                raise


def _images(images: list[dict[str, Any]]) -> str:
    unique: dict[bytes, dict[str, Any]] = {}
    for image in images:
        unique.setdefault(orjson.dumps(image, option=orjson.OPT_SORT_KEYS, default=str), image)
    return orjson.dumps(list(unique.values()), default=str).decode()


def _offset(r: Any) -> GroupOffset:
    return GroupOffset(
        r.group_name,
        r.alias,
        int(r.position),
        orjson.loads(r.offset_json),
        r.index_name,
        int(r.applied),
        int(r.deleted),
        float(r.lag_s),
        float(r.updated_at),
    )
