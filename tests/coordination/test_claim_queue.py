"""The queue a Spark task claims from ends when its driver run no longer holds the alias lock.

Found by the lost-lock test: a driver whose lock was taken cancels its Spark job, but the task's
Python worker ran on for seconds, claiming and completing more partitions; those Spark then
killed mid-way stayed claimed by dead owners until their claim timeout.
"""

from __future__ import annotations

from sparkindex.coordination.recovery import held_by_run, holder_name
from sparkindex.coordination.store import CoordinationStore
from sparkindex.spark.partition_job import claim_queue
from tests.coordination.helpers import new_job


def test_the_queue_ends_once_the_lock_is_taken(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 4)
    retries = {pid: 0 for pid in ids}
    store.locks.acquire("products", holder_name("run-a"), 60.0)
    queue = claim_queue(store, job_id, "run-a", retries, ["products"])
    first = next(queue)
    assert first in ids
    assert store.claim(first, "task-1", "run-a", 60.0) is not None
    store.locks.acquire("products", "thief", 60.0, holder_is_dead=lambda _lock: True)
    assert list(queue) == [], "a task of a run that lost its lock claimed on"
    lock = store.locks.get("products")
    assert lock is not None and lock.holder == "thief"


def test_the_queue_serves_its_run_while_it_holds_the_lock(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 3)
    store.locks.acquire("products", holder_name("run-a"), 60.0)
    assert sorted(claim_queue(store, job_id, "run-a", {pid: 0 for pid in ids}, ["products"])) == sorted(ids)
    # another run of the same host and process is not this one: the run id decides
    assert list(claim_queue(store, job_id, "run-b", {pid: 0 for pid in ids}, ["products"])) == []


def test_a_missing_or_foreign_lock_is_not_held() -> None:
    assert not held_by_run(None, "run-a")
