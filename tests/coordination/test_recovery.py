"""Startup recovery of orphaned jobs, acting on every store (the pure decide() is in tests/unit)."""

from __future__ import annotations

import time

import pytest

from sparkindex.coordination.records import JobRecord, PartitionSpec
from sparkindex.coordination.recovery import NOT_RESUMABLE, recover
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import IllegalTransition, LockLost
from tests.coordination.helpers import expire, job_in

J = JobStatus
P = PartitionStatus
MAX_AGE = 3600.0


def test_recover_running_job_resets_partitions_and_becomes_ready(store: CoordinationStore) -> None:
    job = job_in(store, J.RUNNING)
    store.partition_rows.add_partitions(job.id, [PartitionSpec("products", i, None, None, 10, 10, 0) for i in range(3)])
    ids = [p.id for p in store.partition_rows.partitions(job.id)]
    a = store.partition_rows.claim(ids[0], "dead-exec", "dead-run", 60)
    b = store.partition_rows.claim(ids[1], "dead-exec", "dead-run", 60)
    assert a is not None and b is not None
    store.partition_rows.save_progress(a.id, a.claim_token, [42], 4, 0)
    store.partition_rows.complete(b.id, b.claim_token)

    decision = recover(store, store.job_rows.job(job.id), holder_alive=False, max_age_s=MAX_AGE)
    assert decision.action == "resume"
    assert store.job_rows.job(job.id).status == J.READY
    reset = store.partition_rows.partition(a.id)
    assert reset.status == P.PENDING and reset.cursor == (42,) and reset.owner is None
    assert reset.retry_count == 0, "a dead driver is not the partition's fault"
    assert reset.processed_count == 4
    assert store.partition_rows.partition(b.id).status == P.COMPLETED
    statuses = sorted(p.status for p in store.partition_rows.partitions(job.id))
    assert statuses == [P.COMPLETED, P.PENDING, P.PENDING]
    # the old claim is fenced: its driver cannot write after recovery
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(a.id, a.claim_token, [43], 1, 0)


def test_recover_with_live_holder_changes_nothing(store: CoordinationStore) -> None:
    job = job_in(store, J.RUNNING)
    store.partition_rows.add_partitions(job.id, [PartitionSpec("products", 0, None, None, 10, 10, 0)])
    rec = store.partition_rows.claim(store.partition_rows.partitions(job.id)[0].id, "live", "live-run", 60)
    assert rec is not None
    assert recover(store, store.job_rows.job(job.id), holder_alive=True, max_age_s=MAX_AGE).action == "none"
    assert store.job_rows.job(job.id).status == J.RUNNING
    assert store.partition_rows.partition(rec.id).status == P.PROCESSING


def test_recover_initializing_fails_and_stopping_stops(store: CoordinationStore) -> None:
    init = job_in(store, J.INITIALIZING)
    assert recover(store, init, holder_alive=False, max_age_s=MAX_AGE).action == "fail"
    failed = store.job_rows.job(init.id)
    assert failed.status == J.FAILED and failed.error_message and "recovery" in failed.error_message

    stopping = job_in(store, J.RUNNING)  # a worker held a partition when the stop was asked for
    store.partition_rows.add_partitions(stopping.id, [PartitionSpec("products", 0, None, None, 10, 10, 0)])
    rec = store.partition_rows.claim(store.partition_rows.partitions(stopping.id)[0].id, "dead", "dead-run", 60)
    assert rec is not None
    store.job_rows.transition_job(stopping.id, J.STOPPING)
    assert recover(store, store.job_rows.job(stopping.id), holder_alive=False, max_age_s=MAX_AGE).action == "stop"
    assert store.job_rows.job(stopping.id).status == J.STOPPED
    assert store.partition_rows.partition(rec.id).status == P.PENDING


def _make_old(store: CoordinationStore, job_id: str, seconds: float) -> JobRecord:
    jt = store.t.job
    with store.engine.begin() as conn:
        conn.execute(jt.update().where(jt.c.id == job_id).values(updated_at=time.time() - seconds))
    return store.job_rows.job(job_id)


def test_recover_too_old_running_job_fails(store: CoordinationStore) -> None:
    job = _make_old(store, job_in(store, J.RUNNING).id, 2 * MAX_AGE)
    assert recover(store, job, holder_alive=False, max_age_s=MAX_AGE).action == "fail"
    assert store.job_rows.job(job.id).status == J.FAILED


def test_a_job_recovery_fails_leaves_no_partition_claimed(store: CoordinationStore) -> None:
    """A job failed by recovery is never resumed, so nothing else would ever release its
    partitions: a PROCESSING row left behind stays claimed by a dead driver for good (and looks,
    to anyone reading the store, like work in progress)."""
    job = job_in(store, J.RUNNING)
    store.partition_rows.add_partitions(job.id, [PartitionSpec("products", i, None, None, 10, 10, 0) for i in range(2)])
    claimed = store.partition_rows.claim(store.partition_rows.partitions(job.id)[0].id, "dead-exec", "dead-run", 60)
    assert claimed is not None
    job = _make_old(store, job.id, 2 * MAX_AGE)
    assert recover(store, job, holder_alive=False, max_age_s=MAX_AGE).action == "fail"
    assert store.job_rows.job(job.id).status == J.FAILED
    assert [p.status for p in store.partition_rows.partitions(job.id)] == [P.PENDING, P.PENDING]


@pytest.mark.parametrize("status", [J.FAILED, J.STOPPED], ids=str)
def test_recover_too_old_resumable_job_ends_failed_without_error(store: CoordinationStore, status: JobStatus) -> None:
    """An orphan untouched beyond the recovery age ends FAILED (docstring) - including one that
    already is FAILED: `reindex` calls recover() on every unfinished job, FAILED ones included -
    and the decision tells the driver not to resume it."""
    job = _make_old(store, job_in(store, status).id, 2 * MAX_AGE)
    try:
        decision = recover(store, job, holder_alive=False, max_age_s=MAX_AGE)
    except IllegalTransition as exc:
        pytest.fail(f"recover() of an old {status} job raised {exc!r}")
    assert decision.action == "fail" and not decision.resumable
    assert store.job_rows.job(job.id).status == J.FAILED


def test_recent_failed_job_is_resumable(store: CoordinationStore) -> None:
    job = job_in(store, J.FAILED)
    decision = recover(store, job, holder_alive=False, max_age_s=MAX_AGE)
    assert decision.resumable and store.job_rows.job(job.id).status == J.FAILED


def test_a_job_recovery_failed_is_never_resumed_later(store: CoordinationStore) -> None:
    """A plan interrupted before its partitions were complete: failed by recovery, it must not be
    resumed by the next run as a recent FAILED job (it would finish with partitions missing)."""
    init = job_in(store, J.INITIALIZING)
    recover(store, init, holder_alive=False, max_age_s=MAX_AGE)
    again = recover(store, store.job_rows.job(init.id), holder_alive=False, max_age_s=MAX_AGE)
    assert not again.resumable, again


@pytest.mark.parametrize("error", [NOT_RESUMABLE + "its catch-up position is gone", "abandoned by reindex --new"])
def test_a_job_marked_not_resumable_never_blocks_a_run_planned_from_another_config(
    store: CoordinationStore, error: str
) -> None:
    job = store.job_rows.create_job(["products"], {}, "test", fingerprint="plan-1")
    store.job_rows.transition_job(job.id, J.READY)
    store.job_rows.transition_job(job.id, J.FAILED, error=error)
    decision = recover(store, store.job_rows.job(job.id), holder_alive=False, max_age_s=MAX_AGE, fingerprint="plan-2")
    assert decision.action == "none" and not decision.resumable, decision


def test_recover_refuses_a_job_planned_from_another_config(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test", fingerprint="plan-1")
    job = store.job_rows.transition_job(job.id, J.READY)
    assert store.job_rows.job(job.id).fingerprint == "plan-1"
    decision = recover(store, job, holder_alive=False, max_age_s=MAX_AGE, fingerprint="plan-2")
    assert decision.action == "refuse" and not decision.resumable
    assert "--new" in decision.reason
    assert store.job_rows.job(job.id).status == J.READY, "a refused job is left as it is"
    assert recover(store, job, holder_alive=False, max_age_s=MAX_AGE, fingerprint="plan-1").resumable


def test_recover_with_a_fence_taken_over_is_refused(store: CoordinationStore) -> None:
    job = job_in(store, J.RUNNING)
    old = store.locks.acquire("products", "driver-a", ttl_s=300)
    expire(store, "products")
    store.locks.acquire("products", "driver-b", ttl_s=300)
    with pytest.raises(LockLost, match="products"):
        recover(store, job, holder_alive=False, max_age_s=MAX_AGE, fence={"products": old})
    assert store.job_rows.job(job.id).status == J.RUNNING
