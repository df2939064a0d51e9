"""Alias locks with fencing tokens, the fenced alias swap at the target, and startup recovery."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.records import JobRecord, LockRecord, PartitionSpec
from sparkindex.coordination.recovery import decide, recover
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import IllegalTransition, LockHeld, LockLost
from sparkindex.targets.tantivy.catalogue import AliasCatalogue

J = JobStatus
P = PartitionStatus


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoordinationStore]:
    s = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


@pytest.fixture
def locks(store: CoordinationStore) -> LockManager:
    return store.locks


def expire(store: CoordinationStore, key: str) -> None:
    """Put the lock's expiry in the past, as if its holder had stopped refreshing long ago."""
    lt = store.t.lock
    with store.engine.begin() as conn:
        res = conn.execute(lt.update().where(lt.c.lock_key == key).values(expires_at=time.time() - 100))
        assert res.rowcount == 1


# -- LockManager -----------------------------------------------------------------------------------
def test_first_acquire_gets_token_1_and_others_are_refused(locks: LockManager) -> None:
    assert locks.get("products") is None
    assert locks.acquire("products", "driver-a", ttl_s=300, job_id="job-1") == 1
    rec = locks.get("products")
    assert rec is not None
    assert (rec.holder, rec.token, rec.job_id) == ("driver-a", 1, "job-1")
    assert rec.expires_at > time.time() + 200

    with pytest.raises(LockHeld) as info:
        locks.acquire("products", "driver-b", ttl_s=300)
    assert "driver-a" in str(info.value)
    after = locks.get("products")
    assert after is not None and after.holder == "driver-a" and after.token == 1
    locks.check("products", 1)  # still valid


def test_locks_are_per_key(locks: LockManager) -> None:
    assert locks.acquire("products", "a", ttl_s=300) == 1
    assert locks.acquire("orders", "b", ttl_s=300) == 1
    with pytest.raises(LockHeld):
        locks.acquire("orders", "a", ttl_s=300)


def test_expired_lock_is_taken_over_and_old_token_is_fenced(store: CoordinationStore, locks: LockManager) -> None:
    assert locks.acquire("products", "driver-a", ttl_s=300) == 1
    expire(store, "products")
    assert locks.acquire("products", "driver-b", ttl_s=300) == 2
    rec = locks.get("products")
    assert rec is not None and rec.holder == "driver-b" and rec.token == 2

    with pytest.raises(LockLost):
        locks.refresh("products", 1, 300)
    with pytest.raises(LockLost):
        locks.check("products", 1)
    locks.check("products", 2)
    locks.refresh("products", 2, 300)
    # the refused refresh did not touch the new holder's row
    again = locks.get("products")
    assert again is not None and again.holder == "driver-b" and again.token == 2


def test_ttl_zero_lock_is_taken_over(locks: LockManager) -> None:
    assert locks.acquire("products", "driver-a", ttl_s=0.0) == 1
    assert locks.acquire("products", "driver-b", ttl_s=300) == 2
    with pytest.raises(LockLost):
        locks.check("products", 1)


def test_check_fails_once_the_own_lock_expired(store: CoordinationStore, locks: LockManager) -> None:
    token = locks.acquire("products", "driver-a", ttl_s=300)
    locks.check("products", token)
    expire(store, "products")
    with pytest.raises(LockLost):
        locks.check("products", token)
    # refresh by the still-recorded token revives it (nobody else took it)
    locks.refresh("products", token, 300)
    locks.check("products", token)


def test_release_then_reacquire_grows_the_token(locks: LockManager) -> None:
    t1 = locks.acquire("products", "driver-a", ttl_s=300)
    assert locks.release("products", t1) is True
    with pytest.raises(LockLost):
        locks.check("products", t1)
    t2 = locks.acquire("products", "driver-b", ttl_s=300)
    assert t2 == t1 + 1
    assert locks.release("products", t1) is False, "a stale token must not release the new holder"
    locks.check("products", t2)
    assert locks.release("products", t2) is True
    assert locks.acquire("products", "driver-a", ttl_s=300) == t2 + 1


def test_holder_is_dead_allows_takeover_of_unexpired_lock(locks: LockManager) -> None:
    assert locks.acquire("products", "host:1:run-a", ttl_s=300, job_id="job-a") == 1
    seen: list[LockRecord] = []

    def alive(lock: LockRecord) -> bool:
        seen.append(lock)
        return False

    with pytest.raises(LockHeld):
        locks.acquire("products", "host:2:run-b", ttl_s=300, holder_is_dead=alive)
    assert seen and seen[0].holder == "host:1:run-a" and seen[0].job_id == "job-a"

    token = locks.acquire(
        "products", "host:2:run-b", ttl_s=300, job_id="job-b", holder_is_dead=lambda lock: lock.holder == "host:1:run-a"
    )
    assert token == 2
    rec = locks.get("products")
    assert rec is not None and rec.holder == "host:2:run-b" and rec.job_id == "job-b"
    with pytest.raises(LockLost):
        locks.refresh("products", 1, 300)


def test_transfer_moves_job_only_for_current_token(locks: LockManager) -> None:
    token = locks.acquire("products", "driver", ttl_s=300, job_id="job-1")
    locks.transfer("products", token, "job-1", "job-2")
    rec = locks.get("products")
    assert rec is not None and rec.job_id == "job-2" and rec.token == token
    with pytest.raises(LockLost):
        locks.transfer("products", token, "job-1", "job-3")  # no longer job-1's
    with pytest.raises(LockLost):
        locks.transfer("products", token + 1, "job-2", "job-3")  # wrong token
    rec = locks.get("products")
    assert rec is not None and rec.job_id == "job-2"


# -- fencing at the target -------------------------------------------------------------------------
def test_alias_swap_refuses_older_fence(tmp_path: Path) -> None:
    cat = AliasCatalogue(tmp_path)
    assert cat.get("a") is None
    assert cat.swap("a", "a_v1", fence=5) is None
    assert cat.get("a") == "a_v1"
    with pytest.raises(LockLost):
        cat.swap("a", "a_v2", fence=4)
    assert cat.get("a") == "a_v1"
    assert AliasCatalogue(tmp_path).get("a") == "a_v1", "the refused swap must not reach the file"
    assert cat.swap("a", "a_v2", fence=6) == "a_v1"
    assert cat.get("a") == "a_v2"
    assert cat.read()["a"]["fence"] == 6
    assert cat.read()["a"]["history"] == ["a_v1"]
    # another alias has its own fence
    assert cat.swap("b", "b_v1", fence=1) is None
    assert cat.get("a") == "a_v2" and cat.get("b") == "b_v1"


def test_lock_tokens_fence_the_alias_swap(tmp_path: Path, store: CoordinationStore) -> None:
    """The whole guarantee: a driver whose lock was taken over cannot move the alias."""
    cat = AliasCatalogue(tmp_path / "index")
    old = store.locks.acquire("a", "driver-old", ttl_s=300)
    expire(store, "a")
    new = store.locks.acquire("a", "driver-new", ttl_s=300)
    assert cat.swap("a", "a_v2", fence=new) is None
    with pytest.raises(LockLost):
        cat.swap("a", "a_v1", fence=old)
    assert cat.get("a") == "a_v2"


# -- recovery --------------------------------------------------------------------------------------
def job_in(store: CoordinationStore, status: JobStatus) -> JobRecord:
    """A job moved along legal edges to *status*."""
    paths = {
        J.INITIALIZING: [],
        J.READY: [J.READY],
        J.RUNNING: [J.READY, J.RUNNING],
        J.STOPPING: [J.READY, J.RUNNING, J.STOPPING],
        J.STOPPED: [J.READY, J.RUNNING, J.STOPPING, J.STOPPED],
        J.FAILED: [J.READY, J.RUNNING, J.FAILED],
        J.COMPLETED: [J.READY, J.RUNNING, J.COMPLETED],
        J.COMPLETED_WITH_ERRORS: [J.READY, J.RUNNING, J.COMPLETED_WITH_ERRORS],
    }
    job = store.create_job(["products"], {}, "test")
    for step in paths[status]:
        job = store.transition_job(job.id, step)
    assert job.status == status
    return job


def fake_job(status: JobStatus, updated_at: float) -> JobRecord:
    return JobRecord(
        id="job-1",
        aliases=("products",),
        status=status,
        config={},
        targets={},
        run_id=None,
        total_records=0,
        processed_records=0,
        success_records=0,
        failed_records=0,
        created_at=updated_at,
        started_at=None,
        completed_at=None,
        updated_at=updated_at,
        error_message=None,
    )


NOW = 1_000_000.0
MAX_AGE = 3600.0

# What recovery.py's docstring promises for an orphan (no live holder) that is not too old.
FRESH_ORPHAN = {
    J.INITIALIZING: "fail",
    J.STOPPING: "stop",
    J.READY: "resume",
    J.RUNNING: "resume",
    J.COMPLETED: "none",
    J.COMPLETED_WITH_ERRORS: "none",
    J.STOPPED: "none",
    J.FAILED: "none",
}


@pytest.mark.parametrize("status", list(JobStatus), ids=str)
def test_decide_fresh_orphan(status: JobStatus) -> None:
    decision = decide(fake_job(status, NOW - 10), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert decision.action == FRESH_ORPHAN[status]
    assert decision.reason


@pytest.mark.parametrize("status", list(JobStatus), ids=str)
def test_decide_live_holder_means_hands_off(status: JobStatus) -> None:
    assert decide(fake_job(status, NOW - 10), holder_alive=True, now=NOW, max_age_s=MAX_AGE).action == "none"
    old = fake_job(status, NOW - 10 * MAX_AGE)
    assert decide(old, holder_alive=True, now=NOW, max_age_s=MAX_AGE).action == "none"


@pytest.mark.parametrize("status", [J.READY, J.RUNNING, J.STOPPED], ids=str)
def test_decide_too_old_orphan_fails(status: JobStatus) -> None:
    decision = decide(fake_job(status, NOW - MAX_AGE - 1), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert decision.action == "fail"
    # just inside the age it is still resumed (or left for a rerun)
    inside = decide(fake_job(status, NOW - MAX_AGE + 1), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert inside.action == FRESH_ORPHAN[status]


@pytest.mark.parametrize("status", [J.INITIALIZING, J.STOPPING, J.COMPLETED, J.COMPLETED_WITH_ERRORS], ids=str)
def test_decide_age_does_not_override(status: JobStatus) -> None:
    decision = decide(fake_job(status, NOW - 10 * MAX_AGE), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert decision.action == FRESH_ORPHAN[status]


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


def test_decide_tolerates_clock_skew() -> None:
    """A job updated "in the future" (another host's clock runs ahead) is not too old."""
    job = dataclasses.replace(fake_job(J.RUNNING, NOW), updated_at=NOW + 5)
    assert decide(job, holder_alive=False, now=NOW, max_age_s=MAX_AGE).action == "resume"
