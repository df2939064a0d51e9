"""Dead letters: documents that failed permanently, kept with their error for a later re-drive.

A re-drive that succeeds *resolves* a letter: it leaves the dead-letter table (so lists, counts
and the next re-drive see only what still fails) and is kept in ``<prefix>si_dead_letter_resolved``
with when and how it was resolved, until ``gc`` deletes resolutions older than its cutoff.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.records import DeadLetter


@dataclass(frozen=True)
class ResolvedLetter:
    letter: DeadLetter
    resolved_at: float
    resolution: str


class DeadLetterStore:
    def __init__(self, engine: Engine, table: sa.Table, resolved: sa.Table) -> None:
        self.engine = engine
        self.t = table
        self.resolved_t = resolved

    @rerun_on_conflict
    def add(
        self,
        job_id: str,
        alias: str,
        partition_id: str | None,
        failures: Sequence[tuple[str, str, str]],
        attempt: str | None = None,
    ) -> None:
        """Record (doc_id, error_class, message) failures; a repeat keeps the latest error.

        ``attempts`` counts distinct write attempts, named by *attempt*; by default one job's
        partition is one attempt. Within a job a document is written by exactly one partition,
        and only again when that partition's unacknowledged batch is redone after a crash or a
        takeover: that redo re-adds the same failure and must not count as another attempt. A
        later job (or a re-drive naming its own *attempt*) does count. Writes with neither a
        partition nor an *attempt* (``df.write``) count every time.
        """
        if not failures:
            return
        now = time.time()
        t = self.t
        key = attempt if attempt is not None else (f"{job_id}/{partition_id}" if partition_id is not None else None)
        new_attempt = sa.case((t.c.attempt_key == key, 0), else_=1) if key is not None else 1
        with self.engine.begin() as conn:
            for doc_id, error_class, message in failures:
                res = conn.execute(
                    t.update()
                    .where(t.c.alias == alias, t.c.doc_id == doc_id)
                    .values(
                        job_id=job_id,
                        partition_id=partition_id,
                        error_class=error_class,
                        error_message=message[:4000],
                        attempts=t.c.attempts + new_attempt,
                        attempt_key=key,
                        last_seen=now,
                    )
                )
                if res.rowcount == 0:
                    conn.execute(
                        t.insert().values(
                            alias=alias,
                            doc_id=doc_id,
                            job_id=job_id,
                            partition_id=partition_id,
                            error_class=error_class,
                            error_message=message[:4000],
                            attempts=1,
                            attempt_key=key,
                            first_seen=now,
                            last_seen=now,
                        )
                    )

    def _where(
        self, stmt: sa.Select[Any], alias: str | None, job_id: str | None, error_class: str | None
    ) -> sa.Select[Any]:
        if alias is not None:
            stmt = stmt.where(self.t.c.alias == alias)
        if job_id is not None:
            stmt = stmt.where(self.t.c.job_id == job_id)
        if error_class is not None:
            stmt = stmt.where(self.t.c.error_class == error_class)
        return stmt

    @rerun_on_conflict
    def list(
        self,
        alias: str | None = None,
        job_id: str | None = None,
        limit: int = 1000,
        error_class: str | None = None,
    ) -> list[DeadLetter]:
        stmt = sa.select(*(self.t.c[f.name] for f in fields(DeadLetter))).order_by(self.t.c.last_seen.desc())
        stmt = self._where(stmt, alias, job_id, error_class).limit(limit)
        with self.engine.connect() as conn:
            return [DeadLetter(**r._mapping) for r in conn.execute(stmt)]

    @rerun_on_conflict
    def page(
        self, alias: str, after_doc_id: str | None, limit: int, error_class: str | None = None
    ) -> builtins.list[DeadLetter]:
        """Letters of *alias* in id order after *after_doc_id*: a re-drive walks them in pages."""
        stmt = sa.select(*(self.t.c[f.name] for f in fields(DeadLetter))).order_by(self.t.c.doc_id)
        stmt = self._where(stmt, alias, None, error_class)
        if after_doc_id is not None:
            stmt = stmt.where(self.t.c.doc_id > after_doc_id)
        with self.engine.connect() as conn:
            return [DeadLetter(**r._mapping) for r in conn.execute(stmt.limit(limit))]

    @rerun_on_conflict
    def count_matching(self, alias: str | None = None, error_class: str | None = None) -> int:
        stmt = self._where(sa.select(sa.func.count()).select_from(self.t), alias, None, error_class)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    @rerun_on_conflict
    def count(self, job_id: str) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(self.t).where(self.t.c.job_id == job_id)
                ).scalar_one()
            )

    @rerun_on_conflict
    def remove(self, alias: str, doc_ids: Sequence[str]) -> int:
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    self.t.delete().where(self.t.c.alias == alias, self.t.c.doc_id.in_(list(doc_ids)))
                ).rowcount
            )

    # -- resolution ----------------------------------------------------------------------------------
    @rerun_on_conflict
    def resolve(self, letters: Sequence[DeadLetter], resolution: str) -> int:
        """Move *letters* out of the dead letters into the resolutions, in one transaction.

        Only a letter still as it was read moves: one that failed again meanwhile (its
        ``last_seen`` changed) stays a dead letter.
        """
        if not letters:
            return 0
        now = time.time()
        rt = self.resolved_t
        moved = 0
        with self.engine.begin() as conn:
            for d in letters:
                gone = conn.execute(
                    self.t.delete().where(
                        self.t.c.alias == d.alias, self.t.c.doc_id == d.doc_id, self.t.c.last_seen == d.last_seen
                    )
                ).rowcount
                if gone != 1:
                    continue
                moved += 1
                conn.execute(rt.delete().where(rt.c.alias == d.alias, rt.c.doc_id == d.doc_id))
                row = {f.name: getattr(d, f.name) for f in fields(DeadLetter) if f.name != "partition_id"}
                conn.execute(rt.insert().values(**row, resolved_at=now, resolution=resolution))
        return moved

    @rerun_on_conflict
    def resolved(self, alias: str | None = None, limit: int = 1000) -> builtins.list[ResolvedLetter]:
        rt = self.resolved_t
        stmt = sa.select(rt).order_by(rt.c.resolved_at.desc()).limit(limit)
        if alias is not None:
            stmt = stmt.where(rt.c.alias == alias)
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(stmt)]
        out = []
        for m in rows:
            at, how = m.pop("resolved_at"), m.pop("resolution")
            out.append(ResolvedLetter(DeadLetter(**m, partition_id=None), at, how))
        return out

    @rerun_on_conflict
    def delete_resolved_before(self, cutoff: float, aliases: Sequence[str], dry_run: bool = False) -> int:
        """Forget resolutions of *aliases* older than *cutoff* (``gc``); unresolved letters are never
        touched, nor the aliases of other pipelines sharing the store."""
        rt = self.resolved_t
        where = [rt.c.resolved_at < cutoff, rt.c.alias.in_(list(aliases))]
        with self.engine.begin() as conn:
            if dry_run:
                stmt = sa.select(sa.func.count()).select_from(rt).where(*where)
                return int(conn.execute(stmt).scalar_one())
            return int(conn.execute(rt.delete().where(*where)).rowcount)
