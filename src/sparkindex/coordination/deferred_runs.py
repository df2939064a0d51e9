"""Deferred runs (``si_deferred_run``): per alias, when its last deferred refresh started, so a
sync restarted after ``sync.deferred_at`` does not apply the deferred changes a second time for
that day's refresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sparkindex.coordination.base import StoreBase, rerun_on_conflict


class DeferredRuns(StoreBase):
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
