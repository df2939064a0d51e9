"""Dead letters: documents that failed permanently, kept with their error for a later re-drive."""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.records import DeadLetter


class DeadLetterStore:
    def __init__(self, engine: Engine, table: sa.Table) -> None:
        self.engine = engine
        self.t = table

    def add(self, job_id: str, alias: str, partition_id: str | None, failures: Sequence[tuple[str, str, str]]) -> None:
        """Record (doc_id, error_class, message) failures; a repeat bumps attempts and last_seen."""
        if not failures:
            return
        now = time.time()
        t = self.t
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
                        attempts=t.c.attempts + 1,
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
                            first_seen=now,
                            last_seen=now,
                        )
                    )

    def list(self, alias: str | None = None, job_id: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        stmt = sa.select(self.t).order_by(self.t.c.last_seen.desc()).limit(limit)
        if alias is not None:
            stmt = stmt.where(self.t.c.alias == alias)
        if job_id is not None:
            stmt = stmt.where(self.t.c.job_id == job_id)
        with self.engine.connect() as conn:
            return [DeadLetter(**r._mapping) for r in conn.execute(stmt)]

    def count(self, job_id: str) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(self.t).where(self.t.c.job_id == job_id)
                ).scalar_one()
            )

    def remove(self, alias: str, doc_ids: Sequence[str]) -> int:
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    self.t.delete().where(self.t.c.alias == alias, self.t.c.doc_id.in_(list(doc_ids)))
                ).rowcount
            )
