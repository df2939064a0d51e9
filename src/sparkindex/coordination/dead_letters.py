"""Dead letters: documents that failed permanently, kept with their error for a later re-drive."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import fields

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.records import DeadLetter


class DeadLetterStore:
    def __init__(self, engine: Engine, table: sa.Table) -> None:
        self.engine = engine
        self.t = table

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

    @rerun_on_conflict
    def list(self, alias: str | None = None, job_id: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        stmt = (
            sa.select(*(self.t.c[f.name] for f in fields(DeadLetter))).order_by(self.t.c.last_seen.desc()).limit(limit)
        )
        if alias is not None:
            stmt = stmt.where(self.t.c.alias == alias)
        if job_id is not None:
            stmt = stmt.where(self.t.c.job_id == job_id)
        with self.engine.connect() as conn:
            return [DeadLetter(**r._mapping) for r in conn.execute(stmt)]

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
