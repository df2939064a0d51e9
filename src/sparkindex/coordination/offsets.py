"""Consumer offsets in the coordination store (``si_sync_offset``): per consumer group and alias,
the last position whose changes the target acknowledged, the source's resume offset (JSON), the
physical index it was applied to, running counts, lag and the log the source retains.

The store is what every node reaches (offsets belong where every consumer can read them), so a sync
that restarts on another machine resumes from the same place. ``sync.offsets: target`` keeps them in
an index of the target instead (:mod:`sparkindex.targets.search_engine.offsets`); both are
:class:`ConsumerOffsets`.

Change capture keeps more in the store, each concept in its own module: the version ledger
(:mod:`.ledger`), deferred changes (:mod:`.deferred_changes`), holds with their lease, sync presence and
hand-overs (:mod:`.holds`), deferred runs (:mod:`.deferred_runs`). The
:class:`~sparkindex.coordination.store.CoordinationStore` offers each on its own
(``store.offsets``, ``store.ledger``, ``store.deferred_changes``, ``store.sync_holds``,
``store.deferred_runs``); no caller takes one object for all of them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import sqlalchemy as sa

from sparkindex.coordination.base import StoreBase, rerun_on_conflict
from sparkindex.coordination.deferred_changes import DeferredChange
from sparkindex.coordination.holds import Hold, HoldTables, Presence
from sparkindex.coordination.tables import make_tables

__all__ = [
    "ConsumerOffsetRows",
    "ConsumerOffsets",
    "DeferredChange",
    "GroupOffset",
    "Hold",
    "Presence",
    "make_offset_tables",
]


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
    #: log the source retains for the group (a PostgreSQL slot's WAL), as last measured
    retained_bytes: int | None = None


class ConsumerOffsets(Protocol):
    """Where consumer groups keep their acknowledged positions (``sync.offsets``): the
    coordination store (:class:`ConsumerOffsetRows`, one transaction per acknowledgement) or an
    index of the target (:mod:`sparkindex.targets.search_engine.offsets`). Holds, versions and
    deferred changes stay in the coordination store either way."""

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


class ConsumerOffsetRows(StoreBase):
    """Consumer offsets kept in the store's ``si_sync_offset``."""

    @rerun_on_conflict
    def offsets(self, group: str) -> dict[str, GroupOffset]:
        t = self.t.sync_offset
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.group_name == group)).fetchall()
        return {r.alias: _offset(r) for r in rows}

    @rerun_on_conflict
    def every_group(self) -> list[GroupOffset]:
        with self.engine.connect() as conn:
            return [_offset(r) for r in conn.execute(sa.select(self.t.sync_offset)).fetchall()]

    @rerun_on_conflict
    def groups_of(self, alias: str) -> list[GroupOffset]:
        t = self.t.sync_offset
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
        t = self.t.sync_offset
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
        t = self.t.sync_offset
        cond = t.c.group_name == group
        if aliases is not None:
            cond = sa.and_(cond, t.c.alias.in_(list(aliases)))
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(cond))


@dataclass(frozen=True)
class OffsetTables:
    """The change-capture tables of one prefix (they are part of :func:`make_tables`)."""

    metadata: sa.MetaData
    offset: sa.Table
    doc_version: sa.Table
    snapshot: sa.Table
    deferred_run: sa.Table
    holds: HoldTables


def make_offset_tables(prefix: str = "") -> OffsetTables:
    t = make_tables(prefix)
    holds = HoldTables(t.sync_hold, t.sync_presence, t.reindex_handover)
    return OffsetTables(t.metadata, t.sync_offset, t.doc_version, t.change_snapshot, t.deferred_run, holds)


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
        None if r.retained_bytes is None else int(r.retained_bytes),
    )
