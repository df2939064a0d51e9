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
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.tables import Time

#: the longest message kept per kind (the newest one)
MESSAGE_MAX = 1000


@dataclass(frozen=True)
class SyncEvent:
    group: str
    kind: str
    count: int
    last_at: float
    message: str


def make_event_table(prefix: str = "") -> tuple[sa.MetaData, sa.Table]:
    md = sa.MetaData()
    table = sa.Table(
        f"{prefix}si_sync_event",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("times", sa.BigInteger, nullable=False),
        sa.Column("last_at", Time, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    return md, table


class SyncEvents:
    def __init__(self, engine: Engine, prefix: str = "", *, create: bool = True) -> None:
        """*create* False: a reader (the server) that never writes DDL; it reads nothing until a
        sync made the table."""
        self.engine = engine
        self.create = create
        metadata, self.table = make_event_table(prefix)
        if create:
            metadata.create_all(engine, checkfirst=True)

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
