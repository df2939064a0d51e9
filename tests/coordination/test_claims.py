"""Claiming partitions, fencing, stale reclaim, failure and claim order - on every store.

Staleness is produced by writing ``last_heartbeat`` into the past, never by sleeping.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter

import pytest
import sqlalchemy as sa

from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.states import PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockLost
from tests.coordination.helpers import age_heartbeat, claim_all, new_job, spec

P = PartitionStatus

# -- the 16-process claim race ---------------------------------------------------------------------
WORKERS = 16


@pytest.mark.slow
def test_claim_race_16_processes_each_partition_claimed_exactly_once(
    store_url: tuple[str, str], store: CoordinationStore
) -> None:
    url, prefix = store_url
    job_id, ids = new_job(store, 200)
    assert len(set(ids)) == 200
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    queue = ctx.Queue()
    procs = [ctx.Process(target=claim_all, args=(url, prefix, job_id, n, barrier, queue)) for n in range(WORKERS)]
    for proc in procs:
        proc.start()
    try:
        reports = [queue.get(timeout=300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
    assert all(proc.exitcode == 0 for proc in procs)
    errors = [err for _, _, err in reports if err]
    assert not errors, errors
    results = {n: got for n, got, _ in reports}
    assert sorted(results) == list(range(WORKERS))

    claimed = [pid for got in results.values() for pid in got]
    assert sum(len(got) for got in results.values()) == 200
    assert Counter(claimed).most_common(1)[0][1] == 1, "a partition was claimed twice"
    assert set(claimed) == set(ids)
    assert sum(1 for got in results.values() if got) >= 2, "the workers did not actually race"
    owner_of = {pid: f"w{n}" for n, got in results.items() for pid in got}
    for part in store.partitions(job_id):
        assert part.status == P.PROCESSING
        assert part.claims == 1
        assert part.claim_token == 1
        assert part.owner == owner_of[part.id]
    assert store.claim_next(job_id, owner="late") is None


# -- a claim in flight elsewhere ------------------------------------------------------------------
SERVER_STORES = [
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@pytest.mark.parametrize("store_url", SERVER_STORES, indirect=True)
def test_claim_in_flight_elsewhere_does_not_hide_the_other_partitions(
    store_url: tuple[str, str], store: CoordinationStore
) -> None:
    """Row-locking stores: while another process sits between its pick (FOR UPDATE SKIP LOCKED) and
    its commit, claim_next still hands out one of the remaining partitions instead of None.

    (SQLite serialises whole claims with BEGIN IMMEDIATE, so this moment does not exist there.)
    The other process is a second store; its claim is paused just before its UPDATE (its pick is
    done, its row locks are held) by a cursor event, which runs our claim at that moment - no
    threads, no sleeps.
    """
    url, prefix = store_url
    job_id, ids = new_job(store, 5)
    other = CoordinationStore(url, prefix)
    seen: list[PartitionRecord | None] = []

    def meanwhile(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE") and not seen:
            seen.append(store.claim_next(job_id, "second"))

    sa.event.listen(other.engine, "before_cursor_execute", meanwhile)
    try:
        first = other.claim_next(job_id, "first")
    finally:
        sa.event.remove(other.engine, "before_cursor_execute", meanwhile)
        other.close()
    assert len(seen) == 1, "the other claim never reached its UPDATE"
    second = seen[0]
    assert second is not None, "claim_next returned None while 4 partitions were PENDING and unlocked"
    assert first is not None and first.owner == "first"
    assert second.owner == "second" and second.id != first.id
    assert {p.id for p in store.partitions(job_id, [P.PENDING])} == set(ids) - {first.id, second.id}


# -- claiming one specific partition ---------------------------------------------------------------
def test_claim_specific_partition_retry_and_fencing(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)

    first = store.claim(pid, "exec-1", "run-A", stale_after_s=3600)
    assert first is not None
    assert first.status == P.PROCESSING and first.claim_token == 1 and first.claims == 1
    assert first.owner == "exec-1" and first.run_id == "run-A"

    # a different run while the holder is live: refused, nothing changes
    assert store.claim(pid, "exec-2", "run-B", stale_after_s=3600) is None
    unchanged = store.partition(pid)
    assert unchanged.claim_token == 1 and unchanged.owner == "exec-1" and unchanged.run_id == "run-A"

    # Spark retries the task in the same run: it takes over with a new token
    retry = store.claim(pid, "exec-3", "run-A", stale_after_s=3600)
    assert retry is not None
    assert retry.claim_token == 2 and retry.claims == 2 and retry.owner == "exec-3"

    # the first attempt is fenced off
    with pytest.raises(LockLost):
        store.save_progress(pid, 1, [5], 1, 0)
    with pytest.raises(LockLost):
        store.heartbeat(pid, 1)
    assert store.partition(pid).cursor is None
    store.save_progress(pid, 2, [5], 1, 0)
    after = store.partition(pid)
    assert after.cursor == (5,)
    assert (after.processed_count, after.success_count, after.failed_count) == (1, 1, 0)

    # another run takes over once the heartbeat is stale
    age_heartbeat(store, pid)
    stolen = store.claim(pid, "exec-4", "run-B", stale_after_s=0)
    assert stolen is not None
    assert stolen.claim_token == 3 and stolen.run_id == "run-B" and stolen.owner == "exec-4"
    assert stolen.cursor == (5,), "a takeover resumes from the saved cursor"
    with pytest.raises(LockLost):
        store.save_progress(pid, 2, [9], 1, 0)
    assert store.partition(pid).cursor == (5,)


def test_claim_stale_takeover_needs_a_stale_heartbeat(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    assert store.claim(pid, "a", "run-A", stale_after_s=60) is not None
    age_heartbeat(store, pid, seconds_ago=10)
    assert store.claim(pid, "b", "run-B", stale_after_s=60) is None  # 10 s old, limit 60 s
    age_heartbeat(store, pid, seconds_ago=120)
    rec = store.claim(pid, "b", "run-B", stale_after_s=60)
    assert rec is not None and rec.claim_token == 2


def test_claim_of_completed_partition_returns_none(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.claim(pid, "a", "run-A", stale_after_s=60)
    assert rec is not None
    store.complete(pid, rec.claim_token)
    assert store.claim(pid, "a", "run-A", stale_after_s=0) is None
    age_heartbeat(store, pid)
    assert store.claim(pid, "b", "run-B", stale_after_s=0) is None
    assert store.partition(pid).status == P.COMPLETED


# -- reclaiming stale partitions -------------------------------------------------------------------
def test_reclaim_stale_resets_only_stale_partitions(store: CoordinationStore) -> None:
    job_id, _ = new_job(store, 2)
    stale = store.claim_next(job_id, "dead")
    fresh = store.claim_next(job_id, "alive")
    assert stale is not None and fresh is not None
    store.save_progress(stale.id, stale.claim_token, [7], 3, 0)
    age_heartbeat(store, stale.id)

    reset, failed = store.reclaim_stale(job_id, stale_after_s=60, max_retries=3)
    assert (reset, failed) == (1, 0)

    s = store.partition(stale.id)
    assert s.status == P.PENDING and s.retry_count == 1 and s.owner is None
    assert s.cursor == (7,), "the cursor survives a reclaim"
    assert s.last_error and "reclaimed" in s.last_error
    f = store.partition(fresh.id)
    assert f.status == P.PROCESSING and f.retry_count == 0 and f.owner == "alive"
    assert f.claim_token == fresh.claim_token

    # the old holder of the reclaimed partition is fenced off
    with pytest.raises(LockLost):
        store.save_progress(stale.id, stale.claim_token, [8], 1, 0)


def test_reclaim_drives_partition_to_failed_after_max_retries(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    expected = [(P.PENDING, 1, (1, 0)), (P.PENDING, 2, (1, 0)), (P.FAILED, 2, (0, 1))]
    for round_no, (status, retries, counts) in enumerate(expected, start=1):
        rec = store.claim_next(job_id, f"w{round_no}")
        assert rec is not None and rec.id == pid, f"round {round_no}: partition not claimable"
        assert rec.claim_token == round_no
        age_heartbeat(store, pid)
        assert store.reclaim_stale(job_id, stale_after_s=60, max_retries=2) == counts
        part = store.partition(pid)
        assert part.status == status, f"after reclaim {round_no}"
        assert part.retry_count == retries, f"after reclaim {round_no}"
    final = store.partition(pid)
    assert final.last_error and "exhausted" in final.last_error
    assert store.claim_next(job_id, "w4") is None


def test_reclaim_with_zero_retries_fails_at_once(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    assert store.claim_next(job_id, "w") is not None
    age_heartbeat(store, pid)
    assert store.reclaim_stale(job_id, stale_after_s=60, max_retries=0) == (0, 1)
    assert store.partition(pid).status == P.FAILED


# -- failing and completing --------------------------------------------------------------------------
def test_fail_goes_pending_under_limit_then_failed(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    for attempt in range(2):
        rec = store.claim_next(job_id, "w")
        assert rec is not None
        assert store.fail(pid, rec.claim_token, f"boom {attempt}", max_retries=2) == P.PENDING
        part = store.partition(pid)
        assert part.status == P.PENDING
        assert part.retry_count == attempt + 1
        assert part.last_error == f"boom {attempt}"
        assert part.owner is None
    rec = store.claim_next(job_id, "w")
    assert rec is not None
    assert store.fail(pid, rec.claim_token, "boom", max_retries=2) == P.FAILED
    part = store.partition(pid)
    assert part.status == P.FAILED
    assert part.last_error == "boom"
    assert store.claim_next(job_id, "w") is None


def test_fail_with_a_stale_token_is_lock_lost(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    first = store.claim(pid, "a", "run-A", stale_after_s=3600)
    second = store.claim(pid, "b", "run-A", stale_after_s=3600)
    assert first is not None and second is not None
    with pytest.raises(LockLost):
        store.fail(pid, first.claim_token, "late", max_retries=3)
    part = store.partition(pid)
    assert part.status == P.PROCESSING and part.last_error is None and part.retry_count == 0


def test_complete_exactly_once(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    rec = store.claim_next(job_id, "w")
    assert rec is not None
    store.complete(pid, rec.claim_token)
    done = store.partition(pid)
    assert done.status == P.COMPLETED
    with pytest.raises(LockLost):
        store.complete(pid, rec.claim_token)
    with pytest.raises(LockLost):
        store.save_progress(pid, rec.claim_token, [1], 1, 0)
    with pytest.raises(LockLost):
        store.fail(pid, rec.claim_token, "too late", max_retries=3)
    assert store.partition(pid).status == P.COMPLETED
    assert store.partition(pid).processed_count == 0


def test_release_keeps_cursor_and_allows_reclaim(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    rec = store.claim_next(job_id, "w")
    assert rec is not None
    store.save_progress(pid, rec.claim_token, ["k", 3], 2, 1)
    store.release(pid, rec.claim_token)
    part = store.partition(pid)
    assert part.status == P.PENDING and part.cursor == ("k", 3) and part.retry_count == 0
    again = store.claim_next(job_id, "w2")
    assert again is not None and again.claim_token == rec.claim_token + 1 and again.cursor == ("k", 3)


# -- claim order -----------------------------------------------------------------------------------
def test_claim_next_order_priority_then_largest_work_first(store: CoordinationStore) -> None:
    job = store.create_job(["products"], {}, "test")
    layout = [(0, 5, 0), (1, 50, 0), (2, 20, 1), (3, 500, 0), (4, 1, 2), (5, 30, 1)]
    store.add_partitions(job.id, [spec(i, work=w, priority=pr) for i, w, pr in layout])
    order = []
    while (rec := store.claim_next(job.id, "w")) is not None:
        order.append(rec.partition_index)
    assert order == [4, 5, 2, 3, 1, 0]


def test_claim_next_takes_reopened_closed_partitions_first(store: CoordinationStore) -> None:
    job = store.create_job(["products"], {}, "test")
    store.add_partitions(job.id, [spec(0, work=1), spec(1, work=1000, priority=5), spec(2, work=1)])
    parts = {p.partition_index: p for p in store.partitions(job.id)}
    now = time.time()
    a = store.claim(parts[0].id, "w", "r", 60)
    b = store.claim(parts[2].id, "w", "r", 60)
    assert a and b
    store.close_partition(a.id, a.claim_token, reopen_at=now - 10)  # due again
    store.close_partition(b.id, b.claim_token, reopen_at=now + 3600)  # parked
    assert store.partition(a.id).status == P.CLOSED

    first = store.claim_next(job.id, "w2")
    assert first is not None and first.partition_index == 0
    second = store.claim_next(job.id, "w2")
    assert second is not None and second.partition_index == 1
    assert store.claim_next(job.id, "w2") is None  # index 2 is parked until later
    assert store.partition(b.id).status == P.CLOSED
