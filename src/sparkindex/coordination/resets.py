"""Driver-side resets of partition rows: stale claims reclaimed, a run's or a dead driver's
partitions handed back, failed ones given fresh retries. Each is one transaction, fenced by the
driver's alias locks where a driver that lost them must not act.
"""

from __future__ import annotations

import sqlalchemy as sa

from sparkindex.coordination.base import Fence, StoreBase, rerun_on_conflict, store_now
from sparkindex.coordination.states import PartitionStatus, check_partition

P = PartitionStatus


class PartitionResets(StoreBase):
    @rerun_on_conflict
    def reclaim_stale(self, job_id: str, stale_after_s: float, max_retries: int) -> tuple[int, int]:
        """Stale PROCESSING partitions go back to PENDING under the retry limit, else FAILED."""
        pt = self.t.partition
        check_partition(P.PROCESSING, P.PENDING)
        check_partition(P.PROCESSING, P.FAILED)
        with self.engine.begin() as conn:
            cutoff = store_now(conn) - stale_after_s  # heartbeats are on the store's clock
            stale = sa.and_(pt.c.job_id == job_id, pt.c.status == P.PROCESSING, pt.c.last_heartbeat < cutoff)
            failed = conn.execute(
                pt.update()
                .where(stale, pt.c.retry_count >= max_retries)
                .values(status=P.FAILED, owner=None, last_error="heartbeat timed out; retries exhausted")
            ).rowcount
            reset = conn.execute(
                pt.update()
                .where(stale, pt.c.retry_count < max_retries)
                .values(
                    status=P.PENDING,
                    owner=None,
                    retry_count=pt.c.retry_count + 1,
                    last_error="heartbeat timed out; reclaimed",
                )
            ).rowcount
        return reset, failed

    @rerun_on_conflict
    def reset_run(self, job_id: str, run_id: str, fence: Fence | None) -> int:
        """A driver giving up: its own run's PROCESSING partitions go back to PENDING, and only
        while it still holds the alias locks (*fence*). Partitions another driver's run has taken
        over carry that run's id and are never touched. Not counted as a retry."""
        pt = self.t.partition
        check_partition(P.PROCESSING, P.PENDING)
        with self.engine.begin() as conn:
            self.check_fence(conn, fence, f"job {job_id}: reset of run {run_id}")
            mine = sa.and_(pt.c.job_id == job_id, pt.c.status == P.PROCESSING, pt.c.run_id == run_id)
            res = conn.execute(
                pt.update().where(mine, *self.fence_conditions(fence)).values(status=P.PENDING, owner=None)
            )
            return int(res.rowcount)

    @rerun_on_conflict
    def reset_orphans(self, job_id: str, live_run: str | None = None, *, fence: Fence | None = None) -> int:
        """Recovery after a driver died (its holder is gone): PROCESSING partitions of every run
        but *live_run* go back to PENDING, fenced by the recovering driver's locks. A driver
        cleaning up after itself uses :meth:`reset_run` instead. Not counted as a retry."""
        pt = self.t.partition
        check_partition(P.PROCESSING, P.PENDING)
        cond = sa.and_(pt.c.job_id == job_id, pt.c.status == P.PROCESSING)
        if live_run is not None:
            cond = sa.and_(cond, sa.or_(pt.c.run_id.is_(None), pt.c.run_id != live_run))
        with self.engine.begin() as conn:
            self.check_fence(conn, fence, f"job {job_id}: orphan reset")
            res = conn.execute(
                pt.update().where(cond, *self.fence_conditions(fence)).values(status=P.PENDING, owner=None)
            )
            return int(res.rowcount)

    @rerun_on_conflict
    def retry_failed(self, job_id: str) -> int:
        """A rerun of a failed job: failed partitions get a fresh set of retries."""
        pt = self.t.partition
        check_partition(P.FAILED, P.PENDING)
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    pt.update()
                    .where(pt.c.job_id == job_id, pt.c.status == P.FAILED)
                    .values(status=P.PENDING, retry_count=0)
                ).rowcount
            )
