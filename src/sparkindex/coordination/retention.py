"""Retention: which old jobs ``gc`` may delete, and deleting them with their partitions.

A job may go only when nothing can still need it: finished (COMPLETED, COMPLETED_WITH_ERRORS)
before the cutoff, or FAILED/STOPPED before the cutoff *and* beyond the age at which a rerun
would resume it (``recovery_max_age_s``). A job in any other state is running, or about to, and
is never touched. The deletion re-checks that in the same transaction (the job's status and
``updated_at`` as read), so a job a rerun resumes between the listing and the delete stays.
Dead letters are not a job's: unresolved ones outlive their job (they name the alias and
document) until a re-drive resolves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.states import FINISHED_JOB_STATES, JobStatus
from sparkindex.coordination.store import CoordinationStore

RESUMABLE_WHEN_YOUNG = frozenset({JobStatus.FAILED, JobStatus.STOPPED})


@dataclass(frozen=True)
class Kept:
    """Something gc looked at and left, and why (reported, so a refusal is never silent)."""

    what: str  # job, index
    name: str
    reason: str


def job_time(job: JobRecord) -> float:
    return job.completed_at or job.updated_at


def classify_jobs(
    jobs: Sequence[JobRecord], cutoff: float, now: float, recovery_max_age_s: float
) -> tuple[list[JobRecord], list[Kept]]:
    """The jobs older than *cutoff* that may be deleted, and those older ones that must stay."""
    doomed: list[JobRecord] = []
    kept: list[Kept] = []
    for job in jobs:
        if job_time(job) >= cutoff:
            continue  # young: neither deleted nor worth reporting
        if job.status in FINISHED_JOB_STATES:
            doomed.append(job)
        elif job.status in RESUMABLE_WHEN_YOUNG:
            if job.updated_at < now - recovery_max_age_s:
                doomed.append(job)
            else:
                kept.append(Kept("job", job.id, f"{job.status}: a rerun would still resume it"))
        else:
            kept.append(Kept("job", job.id, f"{job.status}: running jobs are never deleted"))
    return doomed, kept


class Retention:
    def __init__(self, store: CoordinationStore) -> None:
        self.store = store
        self.engine = store.engine
        self.t = store.t

    @rerun_on_conflict
    def partition_count(self, job_ids: Sequence[str]) -> int:
        pt = self.t.partition
        with self.engine.connect() as conn:
            stmt = sa.select(sa.func.count()).select_from(pt).where(pt.c.job_id.in_(list(job_ids)))
            return int(conn.execute(stmt).scalar_one()) if job_ids else 0

    @rerun_on_conflict
    def delete_job(self, job: JobRecord) -> int | None:
        """Delete *job* and its partitions if it is still as read; the partitions deleted, or
        None when the job changed meanwhile (and was left alone)."""
        jt, pt = self.t.job, self.t.partition
        with self.engine.begin() as conn:
            # The conditional UPDATE locks the row (PostgreSQL/MySQL) and proves it unchanged.
            held = conn.execute(
                jt.update()
                .where(jt.c.id == job.id, jt.c.status == str(job.status), jt.c.updated_at == job.updated_at)
                .values(updated_at=jt.c.updated_at)
            ).rowcount
            if held != 1:
                return None
            conn.execute(self.t.write_ahead.delete().where(self.t.write_ahead.c.job_id == job.id))
            # its swap attempts: the fence log keeps what the jobs kept can still be judged by
            conn.execute(self.t.swap_attempt.delete().where(self.t.swap_attempt.c.job_id == job.id))
            parts = int(conn.execute(pt.delete().where(pt.c.job_id == job.id)).rowcount)
            conn.execute(jt.delete().where(jt.c.id == job.id))
        return parts


__all__ = ["Kept", "Retention", "classify_jobs", "job_time"]
