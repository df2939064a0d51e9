"""The job and partition state machines as enforced by the coordination store - on every store."""

from __future__ import annotations

import pytest

from sparkindex.coordination.records import PartitionSpec
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import IllegalTransition, LockLost


def test_store_refuses_illegal_job_transition_and_keeps_status(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    assert job.status == JobStatus.INITIALIZING
    with pytest.raises(IllegalTransition):
        store.job_rows.transition_job(job.id, JobStatus.COMPLETED)
    after = store.job_rows.job(job.id)
    assert after.status == JobStatus.INITIALIZING
    assert after.completed_at is None
    # a legal move still works afterwards
    assert store.job_rows.transition_job(job.id, JobStatus.READY).status == JobStatus.READY
    with pytest.raises(IllegalTransition):
        store.job_rows.transition_job(job.id, JobStatus.INITIALIZING)
    assert store.job_rows.job(job.id).status == JobStatus.READY


def test_store_legal_job_path_sets_timestamps(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    store.job_rows.transition_job(job.id, JobStatus.READY)
    running = store.job_rows.transition_job(job.id, JobStatus.RUNNING)
    assert running.started_at is not None and running.completed_at is None
    done = store.job_rows.transition_job(job.id, JobStatus.COMPLETED)
    assert done.status == JobStatus.COMPLETED and done.completed_at is not None
    with pytest.raises(IllegalTransition):
        store.job_rows.transition_job(job.id, JobStatus.READY)
    assert store.job_rows.job(job.id).status == JobStatus.COMPLETED


def test_complete_on_pending_partition_is_lock_lost(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    store.partition_rows.add_partitions(job.id, [PartitionSpec("products", 0, None, None, 10, 10, 0)])
    (part,) = store.partition_rows.partitions(job.id)
    assert part.status == PartitionStatus.PENDING
    with pytest.raises(LockLost):
        store.partition_rows.complete(part.id, part.claim_token)
    with pytest.raises(LockLost):
        store.partition_rows.complete(part.id, part.claim_token + 1)
    after = store.partition_rows.partition(part.id)
    assert after.status == PartitionStatus.PENDING
    assert after.claim_token == part.claim_token
