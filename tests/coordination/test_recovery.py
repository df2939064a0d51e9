"""Startup recovery of orphaned jobs, acting on every store (the pure decide() is in tests/unit)."""

from __future__ import annotations

import time

import pytest

from sparkindex.coordination.records import JobRecord, PartitionSpec
from sparkindex.coordination.recovery import recover
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import IllegalTransition, LockLost
from tests.coordination.helpers import job_in

J = JobStatus
P = PartitionStatus
MAX_AGE = 3600.0


def test_recover_running_job_resets_partitions_and_becomes_ready(store: CoordinationStore) -> None:
    job = job_in(store, J.RUNNING)
    store.add_partitions(job.id, [PartitionSpec("products", i, None, None, 10, 10, 0) for i in range(3)])
    a = store.claim_next(job.id, "dead-exec", run_id="dead-run")
    b = store.claim_next(job.id, "dead-exec", run_id="dead-run")
    assert a is not None and b is not None
    store.save_progress(a.id, a.claim_token, [42], 4, 0)
    store.complete(b.id, b.claim_token)

    decision = recover(store, store.job(job.id), holder_alive=False, max_age_s=MAX_AGE)
    assert decision.action == "resume"
    assert store.job(job.id).status == J.READY
    reset = store.partition(a.id)
    assert reset.status == P.PENDING and reset.cursor == (42,) and reset.owner is None
    assert reset.retry_count == 0, "a dead driver is not the partition's fault"
    assert reset.processed_count == 4
    assert store.partition(b.id).status == P.COMPLETED
    statuses = sorted(p.status for p in store.partitions(job.id))
    assert statuses == [P.COMPLETED, P.PENDING, P.PENDING]
    # the old claim is fenced: its driver cannot write after recovery
    with pytest.raises(LockLost):
        store.save_progress(a.id, a.claim_token, [43], 1, 0)


def test_recover_with_live_holder_changes_nothing(store: CoordinationStore) -> None:
    job = job_in(store, J.RUNNING)
    store.add_partitions(job.id, [PartitionSpec("products", 0, None, None, 10, 10, 0)])
    rec = store.claim_next(job.id, "live")
    assert rec is not None
    assert recover(store, store.job(job.id), holder_alive=True, max_age_s=MAX_AGE).action == "none"
    assert store.job(job.id).status == J.RUNNING
    assert store.partition(rec.id).status == P.PROCESSING


def test_recover_initializing_fails_and_stopping_stops(store: CoordinationStore) -> None:
    init = job_in(store, J.INITIALIZING)
    assert recover(store, init, holder_alive=False, max_age_s=MAX_AGE).action == "fail"
    failed = store.job(init.id)
    assert failed.status == J.FAILED and failed.error_message and "recovery" in failed.error_message

    stopping = job_in(store, J.STOPPING)
    store.add_partitions(stopping.id, [PartitionSpec("products", 0, None, None, 10, 10, 0)])
    rec = store.claim_next(stopping.id, "dead")
    assert rec is not None
    assert recover(store, store.job(stopping.id), holder_alive=False, max_age_s=MAX_AGE).action == "stop"
    assert store.job(stopping.id).status == J.STOPPED
    assert store.partition(rec.id).status == P.PENDING


def _make_old(store: CoordinationStore, job_id: str, seconds: float) -> JobRecord:
    jt = store.t.job
    with store.engine.begin() as conn:
        conn.execute(jt.update().where(jt.c.id == job_id).values(updated_at=time.time() - seconds))
    return store.job(job_id)


def test_recover_too_old_running_job_fails(store: CoordinationStore) -> None:
    job = _make_old(store, job_in(store, J.RUNNING).id, 2 * MAX_AGE)
    assert recover(store, job, holder_alive=False, max_age_s=MAX_AGE).action == "fail"
    assert store.job(job.id).status == J.FAILED


@pytest.mark.parametrize("status", [J.FAILED, J.STOPPED], ids=str)
def test_recover_too_old_resumable_job_ends_failed_without_error(store: CoordinationStore, status: JobStatus) -> None:
    """An orphan untouched beyond the recovery age ends FAILED (docstring) - including one that
    already is FAILED: `reindex` calls recover() on every unfinished job, FAILED ones included."""
    job = _make_old(store, job_in(store, status).id, 2 * MAX_AGE)
    try:
        recover(store, job, holder_alive=False, max_age_s=MAX_AGE)
    except IllegalTransition as exc:
        pytest.fail(f"recover() of an old {status} job raised {exc!r}")
    assert store.job(job.id).status == J.FAILED
