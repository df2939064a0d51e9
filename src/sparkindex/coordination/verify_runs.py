"""Results of verify runs, one row per run and alias, where the server and its metrics read drift.

Kept in the coordination store beside the jobs, so a check run by any process (the CLI, the
scheduled check inside ``serve`` or ``sync``) shows on every page and scrape
(``<prefix>si_verify_run``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.tables import VERIFY_COUNTS, Tables, make_tables

#: drift counts kept as columns (the rest of the report is JSON)
COUNTS = VERIFY_COUNTS


def verify_run_table(prefix: str) -> sa.Table:
    """The verify-run table of *prefix* (part of :func:`coordination.tables.make_tables`)."""
    return make_tables(prefix).verify_run


def prefix_of(store: OpenStore) -> str:
    """The store's table prefix."""
    return store.t.prefix


class OpenStore(Protocol):
    """What verify runs are read and written through: an open store (its schema current), or
    the server's read-only views of one."""

    engine: Engine
    t: Tables


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

    def __init__(self, store: OpenStore) -> None:
        self.engine = store.engine
        self.t = store.t.verify_run

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
    def newest_per_alias(self) -> builtins.list[VerifyRun]:
        """The newest run of each alias, by alias (what the page and the drift metrics show)."""
        t = self.t
        last = sa.select(t.c.alias, sa.func.max(t.c.finished_at).label("f")).group_by(t.c.alias).subquery()
        stmt = sa.select(t).join(last, sa.and_(last.c.alias == t.c.alias, last.c.f == t.c.finished_at))
        newest: dict[str, VerifyRun] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(stmt):
                run = self._decode(row)
                newest.setdefault(run.alias, run)  # two runs that finished at the same instant: either
        return [newest[alias] for alias in sorted(newest)]

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
