"""Results of verify runs, one row per run and alias, where the server and its metrics read drift.

Kept in the coordination store beside the jobs, so a check run by any process (the CLI, the
scheduled check inside ``serve`` or ``sync``) shows on every page and scrape. The table is this
module's own (``<prefix>si_verify_run``), created on first use, so adding it needed no migration
of the shared schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import Time

#: drift counts kept as columns (the rest of the report is JSON)
COUNTS = ("checked", "missing", "extra", "stale", "duplicates", "unbuildable", "index_docs")


def verify_run_table(prefix: str) -> sa.Table:
    t = sa.Table(
        f"{prefix}si_verify_run",
        sa.MetaData(),
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("index_name", sa.String(255)),
        sa.Column("trigger", sa.String(32), nullable=False),  # cli, scheduled, api
        sa.Column("repair", sa.Boolean, nullable=False, default=False),
        sa.Column("status", sa.String(16), nullable=False),  # clean, drift, failed
        *(sa.Column(c, sa.BigInteger, nullable=False, default=0) for c in COUNTS),
        sa.Column("started_at", Time, nullable=False),
        sa.Column("finished_at", Time, nullable=False),
        sa.Column("report_json", sa.Text),
        sa.Column("error", sa.Text),
    )
    sa.Index(f"{prefix}si_verify_run_latest", t.c.alias, t.c.finished_at)
    return t


def prefix_of(store: CoordinationStore) -> str:
    """The store's table prefix, read back from one of its own table names."""
    return str(store.t.job.name)[: -len("si_job")]


def ensure_table(engine: Engine, table: sa.Table) -> None:
    """Create *table* unless it exists; a concurrent creator winning the race is fine."""
    try:
        table.create(engine, checkfirst=True)
    except DBAPIError:
        if not sa.inspect(engine).has_table(table.name):
            raise


@dataclass(frozen=True)
class VerifyRun:
    run_id: str
    alias: str
    index_name: str | None
    trigger: str
    repair: bool
    status: str
    checked: int
    missing: int
    extra: int
    stale: int
    duplicates: int
    unbuildable: int
    index_docs: int
    started_at: float
    finished_at: float
    report: dict[str, Any] | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class VerifyRuns:
    """Recording and reading verify results in the coordination store."""

    def __init__(self, store: CoordinationStore) -> None:
        self.engine = store.engine
        self.t = verify_run_table(prefix_of(store))
        ensure_table(self.engine, self.t)

    @rerun_on_conflict
    def record(self, runs: list[VerifyRun]) -> None:
        if not runs:
            return
        rows = []
        for r in runs:
            row = r.to_dict()
            report = row.pop("report")
            row["report_json"] = None if report is None else orjson.dumps(report).decode()
            rows.append(row)
        with self.engine.begin() as conn:
            conn.execute(self.t.insert(), rows)

    def _decode(self, row: Any) -> VerifyRun:
        m = dict(row._mapping)
        raw = m.pop("report_json")
        return VerifyRun(**m, report=None if raw is None else orjson.loads(raw))

    @rerun_on_conflict
    def latest(self, alias: str, trigger: str | None = None) -> VerifyRun | None:
        """The newest run of *alias* (of one *trigger*, e.g. ``scheduled``, when given)."""
        stmt = sa.select(self.t).where(self.t.c.alias == alias)
        if trigger is not None:
            stmt = stmt.where(self.t.c.trigger == trigger)
        with self.engine.connect() as conn:
            row = conn.execute(stmt.order_by(self.t.c.finished_at.desc()).limit(1)).first()
        return None if row is None else self._decode(row)

    @rerun_on_conflict
    def list(self, alias: str | None = None, limit: int = 50) -> list[VerifyRun]:
        stmt = sa.select(self.t).order_by(self.t.c.finished_at.desc()).limit(limit)
        if alias is not None:
            stmt = stmt.where(self.t.c.alias == alias)
        with self.engine.connect() as conn:
            return [self._decode(r) for r in conn.execute(stmt)]

    @rerun_on_conflict
    def delete_before(
        self, cutoff: float, aliases: Sequence[str], keep_latest: bool = True, dry_run: bool = False
    ) -> int:
        """Drop runs of *aliases* finished before *cutoff*; the newest run of each alias stays
        (*keep_latest*): it is what the page shows."""
        t = self.t
        doomed = sa.select(t.c.run_id, t.c.alias).where(t.c.finished_at < cutoff, t.c.alias.in_(list(aliases)))
        if keep_latest:
            newest = sa.select(t.c.alias, sa.func.max(t.c.finished_at).label("f")).group_by(t.c.alias).subquery()
            doomed = doomed.where(~sa.exists().where(newest.c.alias == t.c.alias, newest.c.f == t.c.finished_at))
        with self.engine.begin() as conn:
            keys = [tuple(r) for r in conn.execute(doomed)]
            if not dry_run:
                for run_id, alias in keys:
                    conn.execute(t.delete().where(t.c.run_id == run_id, t.c.alias == alias))
        return len(keys)
