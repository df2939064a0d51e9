"""One driver per job: every driver-side job update is fenced by the holder's lock token, and a
failing driver resets only the partitions of its own run - on every store."""

from __future__ import annotations

import pytest

from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockLost
from tests.coordination.helpers import age_heartbeat, expire, new_job

J = JobStatus
P = PartitionStatus


def take_over(store: CoordinationStore) -> tuple[int, int]:
    """Driver A holds the lock, stalls past its TTL, driver B takes the lock over."""
    a = store.locks.acquire("products", "driver-a", ttl_s=300)
    expire(store, "products")
    b = store.locks.acquire("products", "driver-b", ttl_s=300)
    return a, b


def test_transition_with_a_taken_over_lock_is_refused(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    a = store.locks.acquire("products", "driver-a", ttl_s=300)
    assert store.job_rows.transition_job(job.id, J.READY, fence={"products": a}).status == J.READY
    expire(store, "products")
    b = store.locks.acquire("products", "driver-b", ttl_s=300)

    with pytest.raises(LockLost) as info:
        store.job_rows.transition_job(job.id, J.RUNNING, fence={"products": a})
    assert job.id in str(info.value) and "products" in str(info.value)
    assert store.job_rows.job(job.id).status == J.READY, "the refused transition must not be written"

    assert store.job_rows.transition_job(job.id, J.RUNNING, fence={"products": b}).status == J.RUNNING


def test_fence_over_several_aliases_needs_every_one(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["orders", "products"], {}, "test")
    fence = {alias: store.locks.acquire(alias, "driver-a", ttl_s=300) for alias in ("orders", "products")}
    expire(store, "orders")
    store.locks.acquire("orders", "driver-b", ttl_s=300)
    with pytest.raises(LockLost, match="orders"):
        store.job_rows.transition_job(job.id, J.READY, fence=fence)
    assert store.job_rows.job(job.id).status == J.INITIALIZING


def test_update_job_is_fenced(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    a, b = take_over(store)
    with pytest.raises(LockLost, match="products"):
        store.job_rows.update_job(job.id, fence={"products": a}, run_id="run-a")
    assert store.job_rows.job(job.id).run_id is None
    store.job_rows.update_job(job.id, fence={"products": b}, run_id="run-b", targets={"products": "products_v2"})
    after = store.job_rows.job(job.id)
    assert after.run_id == "run-b" and after.targets == {"products": "products_v2"}


def test_roll_up_is_fenced(store: CoordinationStore) -> None:
    job_id, _ = new_job(store, 2)
    a, b = take_over(store)
    with pytest.raises(LockLost):
        store.roll_up(job_id, fence={"products": a})
    assert store.roll_up(job_id, fence={"products": b})["products"].total == 20


def test_failing_driver_never_resets_partitions_of_another_run(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 4)
    # driver A (run-A) claims three partitions, then stalls; driver B takes the lock over
    for pid in ids[:3]:
        assert store.partition_rows.claim(pid, "exec-a", "run-A", stale_after_s=3600) is not None
    a, b = take_over(store)
    # B's run takes over one of A's stale partitions and claims a fresh one
    age_heartbeat(store, ids[2])
    assert store.partition_rows.claim(ids[2], "exec-b", "run-B", stale_after_s=60) is not None
    assert store.partition_rows.claim(ids[3], "exec-b", "run-B", stale_after_s=60) is not None

    # A fails and cleans up with its own (stale) fence: refused, nothing changes
    with pytest.raises(LockLost, match="products"):
        store.partition_resets.reset_run(job_id, "run-A", fence={"products": a})
    assert [store.partition_rows.partition(pid).status for pid in ids] == [P.PROCESSING] * 4

    # the holder resets run-A's leftovers: only those, never run-B's partitions
    assert store.partition_resets.reset_run(job_id, "run-A", fence={"products": b}) == 2
    parts = {pid: store.partition_rows.partition(pid) for pid in ids}
    assert [parts[pid].status for pid in ids] == [P.PENDING, P.PENDING, P.PROCESSING, P.PROCESSING]
    assert parts[ids[2]].run_id == "run-B" and parts[ids[3]].owner == "exec-b"
    assert parts[ids[0]].retry_count == 0, "a dead driver is not the partition's fault"
