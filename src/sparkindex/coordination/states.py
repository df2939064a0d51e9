"""Every state a job or a partition can be in, and the only moves between them.

All transitions are written down here and nowhere else; the store checks each one before it
writes (:func:`check_job` / :func:`check_partition`) and its updates are conditional on the state
it read, so two processes can never both make a move from the same state.
"""

from __future__ import annotations

from enum import StrEnum

from sparkindex.errors import IllegalTransition


class JobStatus(StrEnum):
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    COMPLETED_WITH_ERRORS = "COMPLETED_WITH_ERRORS"
    FAILED = "FAILED"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class PartitionStatus(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


J = JobStatus
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    J.INITIALIZING: frozenset({J.READY, J.FAILED}),
    J.READY: frozenset({J.RUNNING, J.STOPPING, J.STOPPED, J.FAILED}),
    J.RUNNING: frozenset({J.COMPLETED, J.COMPLETED_WITH_ERRORS, J.FAILED, J.STOPPING, J.READY}),
    J.STOPPING: frozenset({J.STOPPED, J.FAILED}),
    # A stopped or failed job keeps its completed partitions; a rerun resumes it through READY.
    J.STOPPED: frozenset({J.READY, J.FAILED}),
    J.FAILED: frozenset({J.READY}),
    J.COMPLETED: frozenset(),
    J.COMPLETED_WITH_ERRORS: frozenset(),
}

#: Jobs in these states still hold work a rerun can finish.
RESUMABLE_JOB_STATES = frozenset({J.READY, J.RUNNING, J.STOPPING, J.STOPPED, J.FAILED})
FINISHED_JOB_STATES = frozenset({J.COMPLETED, J.COMPLETED_WITH_ERRORS})

P = PartitionStatus
PARTITION_TRANSITIONS: dict[PartitionStatus, frozenset[PartitionStatus]] = {
    P.PENDING: frozenset({P.PROCESSING}),
    # PROCESSING -> PENDING: released on stop, or retried after a failure or a stale heartbeat.
    # PROCESSING -> PROCESSING: taken over by a retry of the same Spark task (new claim token).
    P.PROCESSING: frozenset({P.COMPLETED, P.FAILED, P.PENDING, P.CLOSED, P.PROCESSING}),
    P.CLOSED: frozenset({P.PROCESSING, P.PENDING}),
    # A rerun of a failed job gives its failed partitions a fresh set of retries.
    P.FAILED: frozenset({P.PENDING}),
    P.COMPLETED: frozenset(),
}


#: The states a claim may take a partition from; the claim statement guards each of them.
CLAIM_SOURCES = frozenset(s for s, targets in PARTITION_TRANSITIONS.items() if P.PROCESSING in targets)


def check_job(current: JobStatus | str, target: JobStatus | str) -> None:
    cur, to = JobStatus(current), JobStatus(target)
    if to not in JOB_TRANSITIONS[cur]:
        raise IllegalTransition(f"job cannot go from {cur} to {to}")


def check_partition(current: PartitionStatus | str, target: PartitionStatus | str) -> None:
    cur, to = PartitionStatus(current), PartitionStatus(target)
    if to not in PARTITION_TRANSITIONS[cur]:
        raise IllegalTransition(f"partition cannot go from {cur} to {to}")
