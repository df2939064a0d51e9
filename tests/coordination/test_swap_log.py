"""The fence log of swap attempts, on every store: what it records, and the stale moves it finds."""

from __future__ import annotations

import pytest

from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.swap_log import ERROR, MOVED, PENDING, REFUSED, SwapAttempt, stale_moves
from sparkindex.errors import LockLost, TransientError
from tests.coordination.helpers import expire


def test_every_attempt_is_recorded_before_and_its_outcome_after(store: CoordinationStore) -> None:
    log = store.swap_log
    token = store.locks.acquire("products", "driver-a", 60)
    with log.attempt("products", "products_v1", None, token, "job-1") as attempt_id:
        [pending] = log.attempts("products")
        assert (pending.id, pending.outcome, pending.finished_at) == (attempt_id, PENDING, None)
    with pytest.raises(LockLost), log.attempt("products", "products_v2", "products_v1", token, "job-2"):
        raise LockLost("alias 'products': fencing token 1 is older than one recorded since; not swapping")
    with pytest.raises(TransientError), log.attempt("orders", "orders_v1", None, 7, "job-3"):
        raise TransientError("target unreachable")
    begun = log.begin("products", "products_v3", "products_v1", token, "job-4")  # its process died here

    moved, refused, pending = log.attempts("products")
    assert (moved.alias, moved.index, moved.expected_previous, moved.fence, moved.job_id) == (
        "products",
        "products_v1",
        None,
        token,
        "job-1",
    )
    assert (moved.outcome, moved.detail, moved.lock_token, moved.lock_holder) == (MOVED, None, token, "driver-a")
    assert moved.finished_at is not None and moved.finished_at >= moved.attempted_at
    assert (refused.outcome, refused.expected_previous, refused.job_id) == (REFUSED, "products_v1", "job-2")
    assert refused.detail is not None and "fencing token 1 is older" in refused.detail
    assert (pending.id, pending.outcome, pending.detail) == (begun, PENDING, None)
    [error] = log.attempts("orders")
    assert (error.outcome, error.fence, error.lock_token, error.lock_holder) == (ERROR, 7, None, None)
    assert error.detail == "TransientError: target unreachable"
    assert [a.id for a in log.attempts()] == sorted([moved.id, refused.id, pending.id, error.id])
    assert stale_moves(log.attempts()) == []


def test_a_move_with_a_fence_older_than_the_lock_table_issued_is_reported(store: CoordinationStore) -> None:
    log = store.swap_log
    old = store.locks.acquire("products", "driver-a", 60)
    with log.attempt("products", "products_v1", None, old, "job-1"):
        pass
    expire(store, "products")  # driver-a was paused past its lease
    new = store.locks.acquire("products", "driver-b", 60)
    assert new == old + 1
    # Planted: driver-a wakes up and moves the alias with its old token (a target that ignored
    # the fence, or a swap made without asking the lock table).
    with log.attempt("products", "products_v2", "products_v1", old, "job-1"):
        pass
    with log.attempt("products", "products_v3", "products_v1", new, "job-2"):
        pass

    [report] = stale_moves(log.attempts())
    stale = log.attempts("products")[1]
    assert (stale.fence, stale.lock_token, stale.lock_holder) == (old, new, "driver-b")
    assert f"attempt {stale.id}" in report and "'products'" in report and "products_v2" in report
    assert f"fence {old}" in report and f"fence {new}" in report and "driver-b" in report
    assert stale_moves(log.attempts("orders")) == []


def test_a_move_with_a_fence_older_than_an_earlier_attempt_is_reported(store: CoordinationStore) -> None:
    """No lock row names the alias here: an earlier attempt's fence is the evidence."""
    log = store.swap_log
    with pytest.raises(LockLost), log.attempt("orders", "orders_v2", "orders_v1", 5, "job-5"):
        raise LockLost("alias 'orders' points at orders_v3, not at orders_v1 as expected; not swapping")
    with log.attempt("orders", "orders_v4", "orders_v1", 4, "job-4"):  # planted: moved after fence 5 tried
        pass
    with log.attempt("orders", "orders_v5", "orders_v1", 5, "job-5"):  # the same holder again: fine
        pass

    [report] = stale_moves(log.attempts())
    assert "orders_v4" in report and "fence 4" in report and "fence 5" in report and "job-5" in report


def test_stale_moves_judges_each_alias_by_its_own_fences_and_in_store_order() -> None:
    def attempt(n: int, alias: str, fence: int | None, outcome: str, lock: int | None = None) -> SwapAttempt:
        return SwapAttempt(n, alias, f"{alias}_v{n}", None, fence, f"job-{n}", float(100 - n), outcome, None, lock)

    attempts = [
        attempt(3, "a", 2, MOVED),  # listed out of order: the store's order (id) decides
        attempt(1, "a", 9, PENDING),
        attempt(2, "b", 1, MOVED),  # another alias: 9 says nothing about it
        attempt(4, "b", None, MOVED),  # a move without a fence cannot be shown fresh
        attempt(5, "c", 3, ERROR, lock=4),  # not a move
    ]
    reports = stale_moves(attempts)
    assert len(reports) == 2
    assert "attempt 3" in reports[0] and "fence 2" in reports[0] and "fence 9" in reports[0]
    assert "attempt 4" in reports[1] and "without a fence" in reports[1]
