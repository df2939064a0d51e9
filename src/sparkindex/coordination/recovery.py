"""Startup recovery of orphaned jobs (the seed's JobRecoveryManager), as a pure decision plus its effect.

A job is orphaned when no live process holds its lock. Then:

* INITIALIZING -> FAILED: planning was cut short; its partition list cannot be trusted.
* STOPPING -> STOPPED: the stop was asked for; honour it, the job stays resumable.
* untouched for longer than ``recovery_max_age_s`` -> FAILED: too old to resume silently.
* READY / RUNNING -> resume: its PROCESSING partitions go back to PENDING, keeping their cursors.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Literal

from sparkindex.coordination.records import JobRecord, LockRecord
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore

log = logging.getLogger(__name__)

Action = Literal["none", "resume", "fail", "stop"]


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


def holder_name(run_id: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{run_id}"


def holder_is_dead(lock: LockRecord) -> bool:
    """A holder on this host whose process is gone is dead; elsewhere only expiry tells."""
    host, _, rest = lock.holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return lock.expires_at < time.time()
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return lock.expires_at < time.time()  # alive, but it stopped refreshing: expired means gone


def decide(job: JobRecord, holder_alive: bool, now: float, max_age_s: float) -> Decision:
    if job.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS):
        return Decision("none", "finished")
    if holder_alive:
        return Decision("none", "a live process holds its lock")
    if job.status == JobStatus.FAILED:
        return Decision("none", "a failed job holds no live work; a rerun resumes it")
    if job.status == JobStatus.INITIALIZING:
        return Decision("fail", "planning was interrupted before its partitions were complete")
    if job.status == JobStatus.STOPPING:
        return Decision("stop", "a stop was requested before its driver died")
    if now - job.updated_at > max_age_s:
        return Decision("fail", f"orphaned and idle for {int(now - job.updated_at)} s, beyond the recovery age")
    if job.status == JobStatus.STOPPED:
        return Decision("none", "a stopped job holds no live work; a rerun resumes it")
    return Decision("resume", "orphaned by a dead driver; its partitions are reset and resumed")


def recover(store: CoordinationStore, job: JobRecord, holder_alive: bool, max_age_s: float) -> Decision:
    decision = decide(job, holder_alive, time.time(), max_age_s)
    if decision.action == "fail":
        store.transition_job(job.id, JobStatus.FAILED, error=f"recovery: {decision.reason}")
    elif decision.action == "stop":
        store.reset_orphans(job.id)
        store.transition_job(job.id, JobStatus.STOPPED)
    elif decision.action == "resume":
        reset = store.reset_orphans(job.id)
        if job.status == JobStatus.RUNNING:
            store.transition_job(job.id, JobStatus.READY)
        log.info("recovered job %s: %d in-flight partitions reset to PENDING", job.id, reset)
    return decision
