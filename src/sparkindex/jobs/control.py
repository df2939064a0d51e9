"""Commands on jobs that are not the job itself: status and a graceful stop."""

from __future__ import annotations

from collections.abc import Sequence

from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import UsageError


def latest_job(store: CoordinationStore, aliases: Sequence[str]) -> JobRecord | None:
    jobs = store.job_rows.jobs(aliases)
    return jobs[0] if jobs else None


def request_stop(store: CoordinationStore, aliases: Sequence[str]) -> JobRecord:
    """Ask the running job to stop: its tasks release their partitions (cursors kept) and it ends STOPPED."""
    for job in store.job_rows.jobs(aliases, [JobStatus.READY, JobStatus.RUNNING]):
        return store.job_rows.transition_job(job.id, JobStatus.STOPPING)
    raise UsageError(f"no running job for {', '.join(aliases)}")
