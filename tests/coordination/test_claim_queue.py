"""The queue a Spark task claims from ends when its driver run no longer holds the alias lock.

Found by the lost-lock test: a driver whose lock was taken cancels its Spark job, but the task's
Python worker ran on for seconds, claiming and completing more partitions; those Spark then
killed mid-way stayed claimed by dead owners until their claim timeout.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

from sparkindex.coordination.recovery import held_by_run, holder_name
from sparkindex.coordination.store import CoordinationStore
from sparkindex.jobs.head_start import HeadStart
from sparkindex.spark.partition_job import claim_queue
from tests.coordination.helpers import expire, new_job


def test_the_queue_ends_once_the_lock_is_taken(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 4)
    retries = {pid: 0 for pid in ids}
    store.locks.acquire("products", holder_name("run-a"), 60.0)
    queue = claim_queue(store, job_id, "run-a", retries, ["products"])
    first = next(queue)
    assert first in ids
    assert store.partition_rows.claim(first, "task-1", "run-a", 60.0) is not None
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


def test_a_missing_or_foreign_lock_is_not_held(store: CoordinationStore) -> None:
    assert not held_by_run(None, "run-a")
    store.locks.acquire("products", "other-host:4242:run-b", 60.0)
    assert not held_by_run(store.locks.get("products"), "run-a")


def test_the_run_holds_its_lock_on_any_host_expired_or_released(store: CoordinationStore) -> None:
    """Tasks on a cluster's other hosts, a frozen driver's lock that expired with nobody taking
    it, and the row a release leaves: none of these may stop the run's tasks."""
    token = store.locks.acquire("products", "other-host:4242:run-a", 60.0)
    assert held_by_run(store.locks.get("products"), "run-a"), "the run id decides, not host or pid"
    expire(store, "products")
    assert held_by_run(store.locks.get("products"), "run-a"), "expired but not taken: still the run's"
    store.locks.release("products", token)
    assert held_by_run(store.locks.get("products"), "run-a")


def test_a_job_of_two_aliases_stops_when_either_lock_is_taken(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 2)
    retries = {pid: 0 for pid in ids}
    for alias in ("products", "reviews"):
        store.locks.acquire(alias, holder_name("run-a"), 60.0)
    assert len(list(claim_queue(store, job_id, "run-a", retries, ["products", "reviews"]))) == 2
    store.locks.acquire("reviews", "thief", 60.0, holder_is_dead=lambda _lock: True)
    assert list(claim_queue(store, job_id, "run-a", retries, ["products", "reviews"])) == []


def test_the_drivers_head_start_stops_claiming_once_the_lock_is_taken(store: CoordinationStore) -> None:
    """The head start claims while the JVM starts, when the keeper has no Spark job to cancel."""
    job_id, _ids = new_job(store, 2)
    store.locks.acquire("products", holder_name("run-a"), 60.0)
    starting: Future[Any] = Future()  # the Spark session, still starting
    head = HeadStart(cast(Any, None), job_id, "run-a", starting, cast(Any, {"products": None}), "fp")
    assert not head._done(store, "me:driver")
    store.locks.acquire("products", "thief", 60.0, holder_is_dead=lambda _lock: True)
    assert head._done(store, "me:driver"), "the head start of a run that lost its lock claimed on"
