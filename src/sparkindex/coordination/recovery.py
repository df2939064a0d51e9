"""Startup recovery of orphaned jobs, as a pure decision plus its effect (docs/internals.md, "Recovery decisions").

A job is orphaned when no live process holds its lock. Then:

* INITIALIZING -> FAILED: planning was cut short; its partition list cannot be trusted.
* STOPPING -> STOPPED: the stop was asked for; honour it, the job stays resumable.
* untouched for longer than ``recovery_max_age_s`` -> FAILED: too old to resume silently. This
  holds for jobs that already are FAILED too: they stay FAILED and are not resumed.
* planned from another plan or mapping (its fingerprint differs) -> refuse: resuming it would mix
  two configs in one index; the driver says so and ``--new`` starts afresh.
* READY / RUNNING -> resume: its PROCESSING partitions go back to PENDING, keeping their cursors.

:attr:`Decision.resumable` tells the driver whether it may resume the job at all.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sparkindex.coordination.base import Fence
from sparkindex.coordination.records import JobRecord, LockRecord
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore

log = logging.getLogger(__name__)

Action = Literal["none", "resume", "fail", "stop", "refuse"]


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    #: the job holds work a rerun may finish (after this decision's effect)
    resumable: bool = False


def holder_name(run_id: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{run_id}"


def held_by_run(lock: LockRecord | None, run_id: str) -> bool:
    """Whether *lock* is still held under the driver run *run_id* (:func:`holder_name`). A Spark
    task asks before it claims more work: a driver that lost its lock cancels its job, but the
    task's Python worker runs on until Spark kills it, and a thief that only took the lock changes
    nothing else the task could see."""
    return lock is not None and lock.holder.rpartition(":")[2] == run_id


def run_holds_its_locks(store: CoordinationStore, aliases: Iterable[str], run_id: str) -> bool:
    """:func:`held_by_run` for every alias of a job: asked before each claim, by the pass's tasks
    and by the driver's head start alike."""
    return all(held_by_run(store.locks.get(alias), run_id) for alias in aliases)


def holder_is_dead(lock: LockRecord) -> bool:
    """A holder on this host whose process is gone is dead. Otherwise only expiry tells, and
    :meth:`~sparkindex.coordination.locks.LockManager.acquire` judges that on the store's clock
    before it asks here: this process's clock may have jumped (a live lock seen as expired would
    give the alias two drivers)."""
    host, _, rest = lock.holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


#: how the error of a FAILED job that must never be resumed begins (abandoned by ``--new``, its
#: versions gone, its catch-up's log gone, failed by recovery): a rerun starts afresh instead
NOT_RESUMABLE = "not resumable: "
#: how such errors began before they carried the mark
_UNMARKED = ("abandoned by reindex --new", "its index versions are gone", "recovery: ")


def not_resumable(job: JobRecord) -> bool:
    """Whether *job* was marked never to be resumed (or failed in a way that meant it, before marks)."""
    error = job.error_message or ""
    return job.status == JobStatus.FAILED and error.startswith((NOT_RESUMABLE, *_UNMARKED))


def decide(
    job: JobRecord, holder_alive: bool, now: float, max_age_s: float, fingerprint: str | None = None
) -> Decision:
    """What to do with *job* found unfinished at startup; *fingerprint* is the current run's plan
    (None: not compared). Jobs planned before fingerprints existed carry none and are compared
    by nothing else, as before."""
    if job.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS):
        return Decision("none", "finished")
    if not_resumable(job):  # before the age and plan checks: such a job never blocks a run
        return Decision("none", job.error_message or "", resumable=False)
    if holder_alive:
        return Decision("none", "a live process holds its lock")
    if job.status == JobStatus.INITIALIZING:
        return Decision("fail", "planning was interrupted before its partitions were complete")
    if job.status == JobStatus.STOPPING:
        return Decision("stop", "a stop was requested before its driver died", resumable=True)
    if now - job.updated_at > max_age_s:
        return Decision("fail", f"orphaned and idle for {int(now - job.updated_at)} s, beyond the recovery age")
    if fingerprint is not None and job.fingerprint is not None and job.fingerprint != fingerprint:
        return Decision(
            "refuse",
            f"job {job.id} was planned from another configuration (plan or mapping changed); "
            "rerun with --new to start afresh",
        )
    if job.status == JobStatus.FAILED:
        return Decision("none", "a failed job holds no live work; a rerun resumes it", resumable=True)
    if job.status == JobStatus.STOPPED:
        return Decision("none", "a stopped job holds no live work; a rerun resumes it", resumable=True)
    return Decision("resume", "orphaned by a dead driver; its partitions are reset and resumed", resumable=True)


def recover(
    store: CoordinationStore,
    job: JobRecord,
    holder_alive: bool,
    max_age_s: float,
    *,
    fingerprint: str | None = None,
    fence: Fence | None = None,
) -> Decision:
    """Decide, then act; every write fenced by the recovering driver's locks (*fence*)."""
    decision = decide(job, holder_alive, time.time(), max_age_s, fingerprint)
    if decision.action == "fail" and job.status != JobStatus.FAILED:
        # a job recovery fails (its planning interrupted, idle too long) is never resumed, so
        # nothing would ever release the partitions its dead driver held
        store.partition_resets.reset_orphans(job.id, fence=fence)
        store.job_rows.transition_job(
            job.id, JobStatus.FAILED, fence=fence, error=f"{NOT_RESUMABLE}recovery: {decision.reason}"
        )
    elif decision.action == "stop":
        store.partition_resets.reset_orphans(job.id, fence=fence)
        store.job_rows.transition_job(job.id, JobStatus.STOPPED, fence=fence)
    elif decision.action == "resume":
        reset = store.partition_resets.reset_orphans(job.id, fence=fence)
        if job.status == JobStatus.RUNNING:
            store.job_rows.transition_job(job.id, JobStatus.READY, fence=fence)
        log.info("recovered job %s: %d in-flight partitions reset to PENDING", job.id, reset)
    return decision
