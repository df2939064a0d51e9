"""Progress totals per entity, aggregated from the partition rows (what ``status`` and the page show)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sparkindex.coordination.base import StoreBase, rerun_on_conflict
from sparkindex.coordination.records import EntityStats


class PartitionStats(StoreBase):
    @rerun_on_conflict
    def stats(self, job_id: str) -> dict[str, EntityStats]:
        """One GROUP BY over the job's partitions: estimated and processed counts per entity and
        the number of partitions in each state (what `status`, the web page and finalize read)."""
        pt = self.t.partition
        stmt = (
            sa.select(
                pt.c.entity,
                pt.c.status,
                sa.func.count(),
                sa.func.sum(pt.c.estimated_count),
                sa.func.sum(pt.c.processed_count),
                sa.func.sum(pt.c.success_count),
                sa.func.sum(pt.c.failed_count),
            )
            .where(pt.c.job_id == job_id)
            .group_by(pt.c.entity, pt.c.status)
        )
        acc: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for entity, status, n, est, proc, ok, bad in conn.execute(stmt):
                e = acc.setdefault(entity, {"total": 0, "processed": 0, "success": 0, "failed": 0, "partitions": {}})
                e["total"] += int(est or 0)
                e["processed"] += int(proc or 0)
                e["success"] += int(ok or 0)
                e["failed"] += int(bad or 0)
                e["partitions"][status] = int(n)
        return {k: EntityStats(k, **v) for k, v in sorted(acc.items())}
