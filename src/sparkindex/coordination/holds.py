"""How a reindex and the live syncs of its aliases take turns, in the coordination store.

A reindex about to swap an alias holds it; every sync serving the alias pauses (answers with the
position it applied) until the hold goes away; the reindex swaps, hands the alias over to the
live consumer groups at the position it caught up to, and releases the hold. Three tables:

* ``si_sync_hold``: per alias, the reindex holding it (``holder``), until when (``expires_at``),
  and the last sync that paused it. A hold is a lease: its holder renews it while it needs it
  (:class:`sparkindex.capture.catch_up.HoldKeeper`), so a reindex killed between placing and
  releasing its holds cannot pause live syncs for ever: :meth:`SyncHolds.holds` returns only
  live holds, and a sync carries on by itself once the lease ran out. Rows from before the lease
  (``expires_at`` NULL) were placed by a version that never renews: they count as live for
  :data:`LEGACY_HOLD_TTL_S` after ``since`` (longer than such a reindex took from its holds to its
  release: the pause wait of 120 s and one last catch-up round), then as expired.
* ``si_sync_presence``: per consumer group, alias and sync process (``holder``), a lease the
  running sync renews: which aliases it serves right now, and whether it has paused one for a
  hold (``paused_for``). A reindex waits for exactly the syncs serving an alias it holds; a sync
  started with ``--index A`` is never waited for by a reindex of B.
* ``si_reindex_handover``: per reindex job and alias, the log position recorded before the
  partitions were planned when no catch-up ran (``start_json``: the head, nothing kept on the
  source), and the swap once it happened (index, fence, time). The swap is recorded before the
  hand-over, so a rerun after a failure in between finishes the hand-over instead of failing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.coordination.base import StoreBase, rerun_on_conflict, store_now

#: How long a hold lives without being renewed (its holder renews it every few seconds).
HOLD_TTL_S = 30.0
#: How long a hold placed before holds had a lease (no ``expires_at``) counts as live.
LEGACY_HOLD_TTL_S = 600.0


@dataclass(frozen=True)
class HoldTables:
    """The three tables of the hand-over (in :mod:`coordination.tables`, with every other)."""

    hold: sa.Table
    presence: sa.Table
    handover: sa.Table


@dataclass(frozen=True)
class Hold:
    alias: str
    holder: str
    since: float
    paused_at: int | None
    paused_by: str | None
    expires_at: float | None = None


@dataclass(frozen=True)
class Presence:
    """A running sync serving an alias (see ``si_sync_presence``)."""

    group: str
    alias: str
    holder: str
    expires_at: float
    paused_for: str | None
    paused_at: int | None


class SyncHolds(StoreBase):
    """Holds (with their lease), sync presence and hand-over records."""

    @property
    def h(self) -> HoldTables:
        return HoldTables(self.t.sync_hold, self.t.sync_presence, self.t.reindex_handover)

    # -- holds (a reindex about to swap pauses live syncs of the alias) -------------------------------
    def _live_hold(self, now: float) -> sa.ColumnElement[bool]:
        t = self.t.sync_hold
        return sa.or_(t.c.expires_at > now, sa.and_(t.c.expires_at.is_(None), t.c.since > now - LEGACY_HOLD_TTL_S))

    @rerun_on_conflict
    def hold(self, alias: str, holder: str, ttl_s: float = HOLD_TTL_S) -> None:
        """Hold *alias* for *ttl_s* (renew with :meth:`renew_holds`). Replaces any hold on it: the
        caller holds the alias's reindex lock, so another holder is a reindex that died."""
        t = self.t.sync_hold
        with self.engine.begin() as conn:
            now = store_now(conn)
            conn.execute(t.delete().where(t.c.alias == alias))
            conn.execute(t.insert().values(alias=alias, holder=holder, since=now, expires_at=now + ttl_s))

    @rerun_on_conflict
    def renew_holds(self, aliases: Sequence[str], holder: str, ttl_s: float = HOLD_TTL_S) -> set[str]:
        """Extend *holder*'s live holds on *aliases*; return the aliases it still held. A hold that
        expired is not revived: a sync may have carried on meanwhile."""
        t = self.t.sync_hold
        held: set[str] = set()
        with self.engine.begin() as conn:
            now = store_now(conn)
            for alias in aliases:
                res = conn.execute(
                    t.update()
                    .where(t.c.alias == alias, t.c.holder == holder, self._live_hold(now))
                    .values(expires_at=now + ttl_s)
                )
                if res.rowcount == 1:
                    held.add(alias)
        return held

    @rerun_on_conflict
    def holds(self, aliases: Sequence[str]) -> dict[str, Hold]:
        """The live holds on *aliases* (expired ones are as good as released)."""
        t = self.t.sync_hold
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t).where(t.c.alias.in_(list(aliases)), self._live_hold(store_now(conn)))
            ).fetchall()
        return {r.alias: Hold(r.alias, r.holder, r.since, r.paused_at, r.paused_by, r.expires_at) for r in rows}

    @rerun_on_conflict
    def pause(self, alias: str, holder: str, position: int, by: str) -> None:
        """Sync *by* has paused *alias* for *holder*'s hold, having applied up to *position*."""
        t, p = self.t.sync_hold, self.t.sync_presence
        with self.engine.begin() as conn:
            conn.execute(
                t.update().where(t.c.alias == alias, t.c.holder == holder).values(paused_at=position, paused_by=by)
            )
            conn.execute(
                p.update().where(p.c.alias == alias, p.c.holder == by).values(paused_for=holder, paused_at=position)
            )

    @rerun_on_conflict
    def release(self, alias: str, holder: str) -> None:
        t = self.t.sync_hold
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.alias == alias, t.c.holder == holder))

    # -- presence (which running sync serves which alias) ----------------------------------------------
    @rerun_on_conflict
    def announce(self, group: str, aliases: Sequence[str], holder: str, ttl_s: float) -> None:
        """Sync *holder* of *group* serves *aliases* for the next *ttl_s* seconds: called when it
        starts and at every lock refresh. Rows of aliases it no longer serves go, as do rows
        anybody left expired (a sync that was killed)."""
        p, t = self.t.sync_presence, self.t.sync_hold
        with self.engine.begin() as conn:
            now = store_now(conn)
            conn.execute(p.delete().where(p.c.expires_at < now))
            conn.execute(
                p.delete().where(p.c.group_name == group, p.c.holder == holder, p.c.alias.notin_(list(aliases)))
            )
            for alias in aliases:
                mine = sa.and_(p.c.group_name == group, p.c.alias == alias, p.c.holder == holder)
                if conn.execute(p.update().where(mine).values(expires_at=now + ttl_s)).rowcount:
                    continue
                # a new row (or one that expired while the sync waited) keeps a pause it answered
                paused = conn.execute(
                    sa.select(t.c.holder, t.c.paused_at).where(t.c.alias == alias, t.c.paused_by == holder)
                ).first()
                conn.execute(
                    p.insert().values(
                        group_name=group,
                        alias=alias,
                        holder=holder,
                        since=now,
                        expires_at=now + ttl_s,
                        paused_for=None if paused is None else paused.holder,
                        paused_at=None if paused is None else paused.paused_at,
                    )
                )

    @rerun_on_conflict
    def retire(self, group: str, holder: str) -> None:
        """Sync *holder* of *group* stopped: it serves nothing any more."""
        p = self.t.sync_presence
        with self.engine.begin() as conn:
            conn.execute(p.delete().where(p.c.group_name == group, p.c.holder == holder))

    @rerun_on_conflict
    def presence(self, aliases: Sequence[str] | None = None) -> list[Presence]:
        """The live presence rows (of *aliases*, or all)."""
        p = self.t.sync_presence
        with self.engine.connect() as conn:
            stmt = sa.select(p).where(p.c.expires_at > store_now(conn))
            if aliases is not None:
                stmt = stmt.where(p.c.alias.in_(list(aliases)))
            rows = conn.execute(stmt).fetchall()
        return [Presence(r.group_name, r.alias, r.holder, float(r.expires_at), r.paused_for, r.paused_at) for r in rows]

    def serving(self, aliases: Sequence[str]) -> dict[str, list[str]]:
        """alias -> the running syncs (holders) serving it; aliases nobody serves are absent."""
        out: dict[str, list[str]] = {}
        for row in self.presence(aliases):
            out.setdefault(row.alias, []).append(row.holder)
        return out

    # -- a reindex's hand-over -------------------------------------------------------------------------
    @rerun_on_conflict
    def record_starts(self, job_id: str, starts: Mapping[str, tuple[int, dict[str, Any], str]]) -> None:
        """Per alias, the log position (position, offset) recorded before planning, and the index."""
        t = self.t.reindex_handover
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.job_id == job_id))
            for alias, (position, offset, index) in starts.items():
                conn.execute(
                    t.insert().values(
                        job_id=job_id,
                        alias=alias,
                        index_name=index,
                        start_position=position,
                        start_json=orjson.dumps(offset).decode(),
                    )
                )

    @rerun_on_conflict
    def starts(self, job_id: str) -> dict[str, tuple[int, dict[str, Any]]]:
        t = self.t.reindex_handover
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.job_id == job_id, t.c.start_json.is_not(None))).fetchall()
        return {r.alias: (int(r.start_position), orjson.loads(r.start_json)) for r in rows}

    @rerun_on_conflict
    def record_swap(self, job_id: str, alias: str, index: str, fence: int | None) -> None:
        t = self.t.reindex_handover
        now = time.time()
        with self.engine.begin() as conn:
            mine = sa.and_(t.c.job_id == job_id, t.c.alias == alias)
            if conn.execute(t.update().where(mine).values(index_name=index, fence=fence, swapped_at=now)).rowcount:
                return
            conn.execute(t.insert().values(job_id=job_id, alias=alias, index_name=index, fence=fence, swapped_at=now))

    @rerun_on_conflict
    def swaps(self, job_id: str) -> dict[str, str]:
        """alias -> the index this job swapped it to, for the swaps recorded."""
        t = self.t.reindex_handover
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.c.alias, t.c.index_name).where(t.c.job_id == job_id, t.c.swapped_at.is_not(None))
            ).fetchall()
        return {r.alias: r.index_name for r in rows}

    @rerun_on_conflict
    def forget_handover(self, job_id: str) -> None:
        t = self.t.reindex_handover
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.job_id == job_id))
