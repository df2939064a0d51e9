"""What went wrong in a sync, counted where every process can see it.

A sync's log reader runs in a Python process Spark owns: what it logs never reaches the
terminal of the ``sparkindex sync`` that started it, and a counter in that process is invisible
to ``/metrics`` (served by ``sparkindex serve``, another process). So the reader, the apply step
and the driver count their errors here, per consumer group and kind; the driver shows new ones
at WARN on the terminal, and the server exports them as ``sparkindex_sync_errors_total{kind}``.
Gaps healed by reconciliation are counted here too (kind ``gap``).

Kinds: ``source`` (the log could not be read: transient), ``apply`` (a batch failed to apply
and is retried), ``restart`` (the streaming query failed and was started again), ``gap`` (the
log could not serve a stored position; reconciled or refused), ``permanent`` (the sync ended).

A counter keeps only the newest message, so each gap is also kept as a row of its own
(``<prefix>si_sync_gap``, beside the counters' ``si_sync_event``): when it was found, why, and how it
ended (reconciled, with what the verify/repair found per alias and the position the stream went
on from; or refused; or a reconciliation that failed), so the page can show a group's history.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.engine import ensure_schema
from sparkindex.coordination.tables import make_tables

#: the longest message kept per kind (the newest one)
MESSAGE_MAX = 1000
#: gaps kept per consumer group (the newest); a sync refused at every start must not grow it forever
GAPS_KEPT = 200

#: how a gap ended; ``open`` while it is reconciled, or when its sync died before it ended (the
#: next start finds the same gap again and records it anew)
GapOutcome = Literal["open", "reconciled", "refused", "failed"]


@dataclass(frozen=True)
class SyncEvent:
    group: str
    kind: str
    count: int
    last_at: float
    message: str


@dataclass(frozen=True)
class GapRecord:
    gap_id: str
    group: str
    alias: str
    found_at: float
    reason: str
    #: the stored position the log could not serve (None: the group held no offset for the alias)
    stored: int | None
    #: the oldest position the log could serve, when the source knew it
    available: int | None
    outcome: str
    ended_at: float | None
    #: reconciled: the position the stream went on from (None: a reindex took the alias over)
    position: int | None
    #: reconciled: what the verify/repair found (and fixed) for the alias, per drift kind
    found: dict[str, int] | None
    #: refused or failed: the error; reconciled: anything worth knowing (documents rejected)
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_gap_table(prefix: str = "") -> sa.Table:
    """The gap table of *prefix* (part of :func:`coordination.tables.make_tables`)."""
    return make_tables(prefix).sync_gap


def make_event_table(prefix: str = "") -> tuple[sa.MetaData, sa.Table]:
    """The counters' table of *prefix*, with the metadata of the whole schema."""
    tables = make_tables(prefix)
    return tables.metadata, tables.sync_event


class SyncEvents:
    def __init__(self, engine: Engine, prefix: str = "", *, create: bool = True, opened: bool = False) -> None:
        """*create*: make sure the store's schema is current first (:func:`ensure_schema`, as
        opening the store does). False: a reader (the server) that never writes DDL; it reads
        nothing from a database where no store was ever opened. *opened*: made by a store that
        has just made its schema current, so there is nothing to create or check."""
        self.engine = engine
        self.create = create or opened
        tables = make_tables(prefix)
        self.table, self.gap_table = tables.sync_event, tables.sync_gap
        if create and not opened:
            ensure_schema(engine, tables)

    @rerun_on_conflict
    def record(self, group: str, kind: str, message: str) -> None:
        t = self.table
        values = {"last_at": time.time(), "message": message[:MESSAGE_MAX]}
        with self.engine.begin() as conn:
            res = conn.execute(
                t.update().where(t.c.group_name == group, t.c.kind == kind).values(times=t.c.times + 1, **values)
            )
            if res.rowcount == 0:
                try:
                    with conn.begin_nested():
                        conn.execute(t.insert().values(group_name=group, kind=kind, times=1, **values))
                except sa.exc.IntegrityError:  # another process inserted it a moment ago
                    conn.execute(
                        t.update()
                        .where(t.c.group_name == group, t.c.kind == kind)
                        .values(times=t.c.times + 1, **values)
                    )

    @rerun_on_conflict
    def events(self, group: str | None = None) -> list[SyncEvent]:
        t = self.table
        stmt = sa.select(t) if group is None else sa.select(t).where(t.c.group_name == group)
        if not self.create and not sa.inspect(self.engine).has_table(t.name):
            return []
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).fetchall()
        return [SyncEvent(r.group_name, r.kind, int(r.times), float(r.last_at), str(r.message)) for r in rows]

    # -- gaps, one row each ------------------------------------------------------------------------
    def gap_found(self, group: str, alias: str, reason: str, stored: int | None, available: int | None) -> str:
        """Record a gap as found (outcome ``open``); returns its id for :meth:`gap_ended`."""
        gap_id = str(uuid.uuid4())
        self._insert_gap(gap_id, group, alias, reason, stored, available)
        return gap_id

    @rerun_on_conflict
    def _insert_gap(
        self, gap_id: str, group: str, alias: str, reason: str, stored: int | None, available: int | None
    ) -> None:
        t = self.gap_table
        row = {
            "gap_id": gap_id,
            "group_name": group,
            "alias": alias,
            "found_at": time.time(),
            "reason": reason[:MESSAGE_MAX],
            "stored": stored,
            "available": available,
            "outcome": "open",
        }
        with self.engine.begin() as conn:
            try:
                with conn.begin_nested():
                    conn.execute(t.insert().values(**row))
            except sa.exc.IntegrityError:  # a rerun after a lost reply: the row is there
                return
            keep = (
                sa.select(t.c.found_at)
                .where(t.c.group_name == group)
                .order_by(t.c.found_at.desc())
                .offset(GAPS_KEPT - 1)
                .limit(1)
            )
            oldest_kept = conn.execute(keep).scalar()
            if oldest_kept is not None:
                conn.execute(t.delete().where(t.c.group_name == group, t.c.found_at < oldest_kept))

    @rerun_on_conflict
    def gap_ended(
        self,
        gap_id: str,
        outcome: GapOutcome,
        *,
        position: int | None = None,
        found: Mapping[str, int] | None = None,
        detail: str | None = None,
    ) -> None:
        t = self.gap_table
        values = {
            "outcome": outcome,
            "ended_at": time.time(),
            "position": position,
            "found_json": None if found is None else orjson.dumps(dict(found)).decode(),
            "detail": None if detail is None else detail[:MESSAGE_MAX],
        }
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.gap_id == gap_id).values(**values))

    @rerun_on_conflict
    def gaps(self, group: str | None = None, limit: int = GAPS_KEPT) -> list[GapRecord]:
        """Gaps newest first (per group at most *limit*), all groups unless *group* is given."""
        t = self.gap_table
        if not self.create and not sa.inspect(self.engine).has_table(t.name):
            return []
        ranked = sa.select(
            t, sa.func.row_number().over(partition_by=t.c.group_name, order_by=t.c.found_at.desc()).label("n")
        )
        if group is not None:
            ranked = ranked.where(t.c.group_name == group)
        sub = ranked.subquery()
        stmt = sa.select(sub).where(sub.c.n <= limit).order_by(sub.c.group_name, sub.c.found_at.desc())
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).fetchall()
        return [
            GapRecord(
                gap_id=r.gap_id,
                group=r.group_name,
                alias=r.alias,
                found_at=float(r.found_at),
                reason=str(r.reason),
                stored=None if r.stored is None else int(r.stored),
                available=None if r.available is None else int(r.available),
                outcome=str(r.outcome),
                ended_at=None if r.ended_at is None else float(r.ended_at),
                position=None if r.position is None else int(r.position),
                found=None if r.found_json is None else {k: int(v) for k, v in orjson.loads(r.found_json).items()},
                detail=r.detail,
            )
            for r in rows
        ]
