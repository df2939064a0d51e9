"""Claiming partitions, fencing, stale reclaim, failure and claim order - on every store.

Staleness is produced by writing ``last_heartbeat`` into the past, never by sleeping.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.coordination.states import PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.views import StoreViews
from sparkindex.errors import LockLost, PartitionNotFound, PermanentError
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
    procs = [ctx.Process(target=claim_all, args=(url, prefix, ids, n, barrier, queue)) for n in range(WORKERS)]
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
    assert len(claimed) == 200
    assert Counter(claimed).most_common(1)[0][1] == 1, "a partition was claimed twice"
    assert set(claimed) == set(ids)
    assert sum(1 for got in results.values() if got) >= 2, "the workers did not actually race"
    owner_of = {pid: f"w{n}" for n, got in results.items() for pid in got}
    for part in store.partition_rows.partitions(job_id):
        assert part.status == P.PROCESSING
        assert part.claims == 1
        assert part.claim_token == 1
        assert part.owner == owner_of[part.id]


# -- the product's path costs one statement per step ------------------------------------------------
@contextmanager
def statements(store: CoordinationStore) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    engines = {store.engine, store.single}  # transactions, and the one-statement writes
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", count)
    direct = store.partition_rows.direct_statements()  # PostgreSQL's hot path runs on the driver's cursor
    for stmt in direct:
        stmt.run = functools.partial(_counted, stmt.run, stmt.sql, count)  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", count)
        for stmt in direct:
            del stmt.run  # the class's method again


def _counted(run: Callable[[Any], Any], sql: str, count: Callable[..., None], params: Any) -> Any:
    count(None, None, sql)
    return run(params)


def test_claim_progress_complete_one_statement_each(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    store.partition_rows.partition(pid)  # connected
    with statements(store) as seen:
        rec = store.partition_rows.claim(pid, "exec-1", "run-A", stale_after_s=60)
    assert rec is not None and rec.claim_token == 1 and rec.status == P.PROCESSING
    expected = ["UPDATE", "SELECT"] if store.engine.dialect.name == "mysql" else ["UPDATE"]
    assert [s for s in seen if s not in ("BEGIN",)] == expected, "no pre-ping, no probe, no re-read"
    with statements(store) as seen:
        store.partition_rows.save_progress(pid, rec.claim_token, [5], 4, 1, writer="exec-1:7")
    assert [s for s in seen if s != "BEGIN"] == ["UPDATE"]
    with statements(store) as seen:
        store.partition_rows.complete(pid, rec.claim_token, cursor=[9], success=3, failed=0)
    assert [s for s in seen if s != "BEGIN"] == ["UPDATE"]
    done = store.partition_rows.partition(pid)
    assert done.status == P.COMPLETED and done.cursor == (9,) and done.writer == "exec-1:7"
    assert (done.processed_count, done.success_count, done.failed_count) == (8, 7, 1)


def test_a_rerun_progress_save_counts_its_batch_once(store: CoordinationStore) -> None:
    """rerun_on_conflict reruns a save whose commit landed but whose reply was lost: the rerun
    must not add the batch's counts again (the finalize step compares them with the index)."""
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "exec-1", "run-A", stale_after_s=60)
    assert rec is not None
    store.partition_rows.save_progress(pid, rec.claim_token, [5], 4, 1)
    store.partition_rows.save_progress(pid, rec.claim_token, [5], 4, 1)  # the rerun of the same batch
    store.partition_rows.heartbeat(pid, rec.claim_token)
    store.partition_rows.save_progress(pid, rec.claim_token, [9], 2, 0)
    now = store.partition_rows.partition(pid)
    assert (now.processed_count, now.success_count, now.failed_count, now.cursor) == (7, 6, 1, (9,))
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(pid, rec.claim_token + 1, [12], 1, 0)


def test_stages_are_recorded_with_their_batches_once_and_only_by_the_owner(store: CoordinationStore) -> None:
    """The finish adopts exactly the stages a partition's record lists: each acknowledged batch's
    stage once (a rerun after a lost reply must not list it twice), none of a lost claim."""
    _, (pid,) = new_job(store, 1)
    first = store.partition_rows.claim(pid, "exec-1", "run-A", stale_after_s=60)
    assert first is not None
    store.partition_rows.save_progress(pid, first.claim_token, [5], 4, 0, stage="p.1.1")
    store.partition_rows.save_progress(pid, first.claim_token, [5], 4, 0, stage="p.1.1")  # the rerun
    store.partition_rows.heartbeat(pid, first.claim_token)  # no stage: the list stays
    age_heartbeat(store, pid)
    second = store.partition_rows.claim(pid, "exec-2", "run-B", stale_after_s=60)
    assert second is not None and second.cursor == (5,)
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(pid, first.claim_token, [7], 2, 0, stage="p.1.2")  # the zombie
    store.partition_rows.complete(pid, second.claim_token, [9], 5, 0, stage="p.2.1")
    store.partition_rows.complete(pid, second.claim_token, [9], 5, 0, stage="p.2.1")  # the rerun
    done = store.partition_rows.partition(pid)
    assert done.stage_names == ["p.1.1", "p.2.1"]
    assert done.success_count == 9


def test_refused_updates_and_unknown_partitions_are_counted_for_the_metrics(
    store: CoordinationStore, store_url: tuple[str, str]
) -> None:
    """Data Prepper's partitionUpdateErrors and partitionNotFoundErrors, recorded in the store (the
    server derives its metrics from it: executors cannot be scraped)."""
    views = StoreViews(*store_url)
    job_id, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "exec-1", "run-A", stale_after_s=60)
    assert rec is not None
    before = views.metrics()
    assert (before.update_errors, before.not_found) == (0, 0)
    for stale in (
        lambda: store.partition_rows.save_progress(pid, rec.claim_token + 1, [3], 1, 0),
        lambda: store.partition_rows.release(pid, 99),
    ):
        with pytest.raises(LockLost):
            stale()
    with pytest.raises(PartitionNotFound):
        store.partition_rows.claim("no-such-partition", "exec-1", "run-A", stale_after_s=60)
    store.partition_rows.count_partition_not_found(job_id)
    after = views.metrics()
    assert (after.update_errors, after.not_found) == (2, 1)


def test_claim_of_unknown_partition_is_an_error(store: CoordinationStore) -> None:
    new_job(store, 1)
    with pytest.raises(PermanentError, match="not found"):
        store.partition_rows.claim("no-such-partition", "a", "run-A", stale_after_s=60)


def test_decimal_and_bytes_cursors_survive(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    store.partition_rows.add_partitions(
        job.id,
        [spec(0).__class__("products", 0, (Decimal("1.10"), b"\x00a"), (Decimal("99.5"), b"\xff"), 1, 1, 0)],
    )
    (part,) = store.partition_rows.partitions(job.id)
    assert part.range_start == (Decimal("1.10"), b"\x00a") and part.range_end == (Decimal("99.5"), b"\xff")
    rec = store.partition_rows.claim(part.id, "a", "run-A", stale_after_s=60)
    assert rec is not None
    store.partition_rows.save_progress(part.id, rec.claim_token, [Decimal("12.340"), b"\x00\xfe|x"], 1, 0)
    assert store.partition_rows.partition(part.id).cursor == (Decimal("12.340"), b"\x00\xfe|x")
    store.partition_rows.complete(part.id, rec.claim_token, cursor=(Decimal("50"), b""), success=1)
    assert store.partition_rows.partition(part.id).cursor == (Decimal("50"), b"")


# -- claiming one specific partition ---------------------------------------------------------------
def test_claim_specific_partition_retry_and_fencing(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)

    first = store.partition_rows.claim(pid, "exec-1", "run-A", stale_after_s=3600)
    assert first is not None
    assert first.status == P.PROCESSING and first.claim_token == 1 and first.claims == 1
    assert first.owner == "exec-1" and first.run_id == "run-A"

    # a different run while the holder is live: refused, nothing changes
    assert store.partition_rows.claim(pid, "exec-2", "run-B", stale_after_s=3600) is None
    unchanged = store.partition_rows.partition(pid)
    assert unchanged.claim_token == 1 and unchanged.owner == "exec-1" and unchanged.run_id == "run-A"

    # Spark retries the task in the same run: it takes over with a new token
    retry = store.partition_rows.claim(pid, "exec-3", "run-A", stale_after_s=3600)
    assert retry is not None
    assert retry.claim_token == 2 and retry.claims == 2 and retry.owner == "exec-3"

    # the first attempt is fenced off
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(pid, 1, [5], 1, 0)
    with pytest.raises(LockLost):
        store.partition_rows.heartbeat(pid, 1)
    assert store.partition_rows.partition(pid).cursor is None
    store.partition_rows.save_progress(pid, 2, [5], 1, 0)
    after = store.partition_rows.partition(pid)
    assert after.cursor == (5,)
    assert (after.processed_count, after.success_count, after.failed_count) == (1, 1, 0)

    # another run takes over once the heartbeat is stale
    age_heartbeat(store, pid)
    stolen = store.partition_rows.claim(pid, "exec-4", "run-B", stale_after_s=0)
    assert stolen is not None
    assert stolen.claim_token == 3 and stolen.run_id == "run-B" and stolen.owner == "exec-4"
    assert stolen.cursor == (5,), "a takeover resumes from the saved cursor"
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(pid, 2, [9], 1, 0)
    assert store.partition_rows.partition(pid).cursor == (5,)


def test_heartbeat_renews_the_lease(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "a", "run-A", stale_after_s=60)
    assert rec is not None
    age_heartbeat(store, pid, seconds_ago=120)
    store.partition_rows.heartbeat(pid, rec.claim_token)  # the worker is still reading a long page
    assert store.partition_rows.claim(pid, "b", "run-B", stale_after_s=60) is None


def test_claim_stale_takeover_needs_a_stale_heartbeat(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    assert store.partition_rows.claim(pid, "a", "run-A", stale_after_s=60) is not None
    age_heartbeat(store, pid, seconds_ago=10)
    assert store.partition_rows.claim(pid, "b", "run-B", stale_after_s=60) is None  # 10 s old, limit 60 s
    age_heartbeat(store, pid, seconds_ago=120)
    rec = store.partition_rows.claim(pid, "b", "run-B", stale_after_s=60)
    assert rec is not None and rec.claim_token == 2


def test_no_partition_of_a_stopping_job_is_claimed(store: CoordinationStore) -> None:
    """The claim statement itself refuses a job being stopped (workers used to read the job
    first: a second statement per partition, and a window between the read and the claim)."""
    from sparkindex.coordination.states import JobStatus

    job_id, (pid, other) = new_job(store, 2)
    store.job_rows.transition_job(job_id, JobStatus.READY)
    store.job_rows.transition_job(job_id, JobStatus.RUNNING)
    assert store.partition_rows.claim(pid, "a", "run-A", stale_after_s=60) is not None
    store.job_rows.transition_job(job_id, JobStatus.STOPPING)
    assert store.partition_rows.claim(other, "a", "run-A", stale_after_s=60) is None
    assert store.partition_rows.claim(pid, "a2", "run-A", stale_after_s=60) is None, "not a retry of the same run"
    age_heartbeat(store, pid)
    assert store.partition_rows.claim(pid, "b", "run-B", stale_after_s=0) is None, "not even a stale one"
    assert (
        store.partition_rows.partition(other).status == P.PENDING and store.partition_rows.partition(pid).owner == "a"
    )
    store.job_rows.transition_job(job_id, JobStatus.STOPPED)
    store.job_rows.transition_job(job_id, JobStatus.READY)  # a rerun resumes the job
    assert store.partition_rows.claim(other, "c", "run-C", stale_after_s=60) is not None


def test_claimed_by_others_sees_only_other_workers_of_the_run(store: CoordinationStore) -> None:
    job_id, (p1, p2) = new_job(store, 2)
    assert not store.partition_rows.claimed_by_others(job_id, "run-A", "driver")
    rec = store.partition_rows.claim(p1, "driver", "run-A", stale_after_s=60)
    assert rec is not None
    assert not store.partition_rows.claimed_by_others(job_id, "run-A", "driver"), "its own claim"
    other = store.partition_rows.claim(p2, "task-1", "run-B", stale_after_s=60)
    assert other is not None
    assert not store.partition_rows.claimed_by_others(job_id, "run-A", "driver"), "another run's worker"
    store.partition_rows.release(p2, other.claim_token)
    mine = store.partition_rows.claim(p2, "task-1", "run-A", stale_after_s=60)
    assert mine is not None and store.partition_rows.claimed_by_others(job_id, "run-A", "driver")
    store.partition_rows.complete(p2, mine.claim_token)
    assert store.partition_rows.claimed_by_others(job_id, "run-A", "driver"), "a completed one counts too"


def test_claim_of_completed_partition_returns_none(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "a", "run-A", stale_after_s=60)
    assert rec is not None
    store.partition_rows.complete(pid, rec.claim_token)
    assert store.partition_rows.claim(pid, "a", "run-A", stale_after_s=0) is None
    age_heartbeat(store, pid)
    assert store.partition_rows.claim(pid, "b", "run-B", stale_after_s=0) is None
    assert store.partition_rows.partition(pid).status == P.COMPLETED


def test_closed_partition_is_claimed_again_once_reopened(store: CoordinationStore) -> None:
    """The worker parks a partition whose target is down (Data Prepper's CLOSED / reOpenAt)."""
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "a", "run-A", stale_after_s=60)
    assert rec is not None
    store.partition_rows.save_progress(pid, rec.claim_token, [40], 40, 0)
    store.partition_rows.close_partition(pid, rec.claim_token, reopen_after_s=3600, error="target down")
    parked = store.partition_rows.partition(pid)
    assert parked.status == P.CLOSED and parked.owner is None and parked.last_error == "target down"
    assert parked.cursor == (40,)
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(pid, rec.claim_token, [41], 1, 0)
    assert store.partition_rows.claim(pid, "a", "run-A", stale_after_s=0) is None, (
        "parked until reopen_at, even for its run"
    )
    pt = store.t.partition
    with store.engine.begin() as conn:
        conn.execute(pt.update().where(pt.c.id == pid).values(reopen_at=store.now() - 1))
    again = store.partition_rows.claim(pid, "b", "run-B", stale_after_s=60)
    assert again is not None and again.claim_token == rec.claim_token + 1 and again.cursor == (40,)


# -- reclaiming stale partitions -------------------------------------------------------------------
def test_reclaim_stale_resets_only_stale_partitions(store: CoordinationStore) -> None:
    _, (a, b) = new_job(store, 2)
    stale = store.partition_rows.claim(a, "dead", "run-A", 60)
    fresh = store.partition_rows.claim(b, "alive", "run-A", 60)
    assert stale is not None and fresh is not None
    store.partition_rows.save_progress(stale.id, stale.claim_token, [7], 3, 0)
    age_heartbeat(store, stale.id)

    reset, failed = store.partition_resets.reclaim_stale(stale.job_id, stale_after_s=60, max_retries=3)
    assert (reset, failed) == (1, 0)

    s = store.partition_rows.partition(stale.id)
    assert s.status == P.PENDING and s.retry_count == 1 and s.owner is None
    assert s.cursor == (7,), "the cursor survives a reclaim"
    assert s.last_error and "reclaimed" in s.last_error
    f = store.partition_rows.partition(fresh.id)
    assert f.status == P.PROCESSING and f.retry_count == 0 and f.owner == "alive"
    assert f.claim_token == fresh.claim_token

    # the old holder of the reclaimed partition is fenced off
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(stale.id, stale.claim_token, [8], 1, 0)


def test_reclaim_drives_partition_to_failed_after_max_retries(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    expected = [(P.PENDING, 1, (1, 0)), (P.PENDING, 2, (1, 0)), (P.FAILED, 2, (0, 1))]
    for round_no, (status, retries, counts) in enumerate(expected, start=1):
        rec = store.partition_rows.claim(pid, f"w{round_no}", f"run-{round_no}", 60)
        assert rec is not None, f"round {round_no}: partition not claimable"
        assert rec.claim_token == round_no
        age_heartbeat(store, pid)
        assert store.partition_resets.reclaim_stale(job_id, stale_after_s=60, max_retries=2) == counts
        part = store.partition_rows.partition(pid)
        assert part.status == status, f"after reclaim {round_no}"
        assert part.retry_count == retries, f"after reclaim {round_no}"
    final = store.partition_rows.partition(pid)
    assert final.last_error and "exhausted" in final.last_error
    assert store.partition_rows.claim(pid, "w4", "run-4", 60) is None


def test_reclaim_with_zero_retries_fails_at_once(store: CoordinationStore) -> None:
    job_id, (pid,) = new_job(store, 1)
    assert store.partition_rows.claim(pid, "w", "run", 60) is not None
    age_heartbeat(store, pid)
    assert store.partition_resets.reclaim_stale(job_id, stale_after_s=60, max_retries=0) == (0, 1)
    assert store.partition_rows.partition(pid).status == P.FAILED


# -- failing and completing --------------------------------------------------------------------------
def test_fail_goes_pending_under_limit_then_failed(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    for attempt in range(2):
        rec = store.partition_rows.claim(pid, "w", f"run-{attempt}", 60)
        assert rec is not None
        assert store.partition_rows.fail(pid, rec.claim_token, f"boom {attempt}", max_retries=2) == P.PENDING
        part = store.partition_rows.partition(pid)
        assert part.status == P.PENDING
        assert part.retry_count == attempt + 1
        assert part.last_error == f"boom {attempt}"
        assert part.owner is None
    rec = store.partition_rows.claim(pid, "w", "run-9", 60)
    assert rec is not None
    assert store.partition_rows.fail(pid, rec.claim_token, "boom", max_retries=2) == P.FAILED
    part = store.partition_rows.partition(pid)
    assert part.status == P.FAILED
    assert part.last_error == "boom"
    assert store.partition_rows.claim(pid, "w", "run-9", 60) is None


def test_fail_with_a_stale_token_is_lock_lost(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    first = store.partition_rows.claim(pid, "a", "run-A", stale_after_s=3600)
    second = store.partition_rows.claim(pid, "b", "run-A", stale_after_s=3600)
    assert first is not None and second is not None
    with pytest.raises(LockLost):
        store.partition_rows.fail(pid, first.claim_token, "late", max_retries=3)
    part = store.partition_rows.partition(pid)
    assert part.status == P.PROCESSING and part.last_error is None and part.retry_count == 0


def test_complete_exactly_once(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "w", "run", 60)
    assert rec is not None
    store.partition_rows.complete(pid, rec.claim_token)
    done = store.partition_rows.partition(pid)
    assert done.status == P.COMPLETED
    # a rerun of the same completion (its reply was lost to a restart) is done already: no error,
    # and its counts are not folded in twice
    store.partition_rows.complete(pid, rec.claim_token, success=5)
    with pytest.raises(LockLost):
        store.partition_rows.complete(pid, rec.claim_token + 1)
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(pid, rec.claim_token, [1], 1, 0)
    with pytest.raises(LockLost):
        store.partition_rows.fail(pid, rec.claim_token, "too late", max_retries=3)
    assert store.partition_rows.partition(pid).status == P.COMPLETED
    assert store.partition_rows.partition(pid).processed_count == 0


def test_release_keeps_cursor_and_allows_reclaim(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "w", "run-A", 60)
    assert rec is not None
    store.partition_rows.save_progress(pid, rec.claim_token, ["k", 3], 2, 1)
    store.partition_rows.release(pid, rec.claim_token)
    part = store.partition_rows.partition(pid)
    assert part.status == P.PENDING and part.cursor == ("k", 3) and part.retry_count == 0
    again = store.partition_rows.claim(pid, "w2", "run-B", 60)
    assert again is not None and again.claim_token == rec.claim_token + 1 and again.cursor == ("k", 3)


# -- claim order -----------------------------------------------------------------------------------
def test_claimable_order_reopened_then_priority_then_largest_work_first(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products"], {}, "test")
    layout = [(0, 5, 0), (1, 50, 0), (2, 20, 1), (3, 500, 0), (4, 1, 2), (5, 30, 1), (6, 1, 0), (7, 2, 0)]
    store.partition_rows.add_partitions(job.id, [spec(i, work=w, priority=pr) for i, w, pr in layout])
    parts = {p.partition_index: p for p in store.partition_rows.partitions(job.id)}
    assert [p.partition_index for p in store.partition_rows.partitions(job.id)] == [4, 5, 2, 3, 1, 0, 7, 6]
    due, parked, busy = (store.partition_rows.claim(parts[i].id, "w", "r", 60) for i in (6, 7, 0))
    assert due and parked and busy
    store.partition_rows.close_partition(due.id, due.claim_token, reopen_after_s=-10)
    store.partition_rows.close_partition(parked.id, parked.claim_token, reopen_after_s=3600)
    # what a pass hands to its workers: re-opened CLOSED first, then PENDING in priority/work order
    assert [p.partition_index for p in store.partition_rows.claimable(job.id)] == [6, 4, 5, 2, 3, 1]
