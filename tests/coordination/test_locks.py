"""Alias locks with fencing tokens, and the lock token fencing the alias swap - on every store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.records import LockRecord
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockHeld, LockLost
from sparkindex.targets.tantivy.catalogue import AliasCatalogue
from tests.coordination.helpers import expire


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
def test_lock_tokens_fence_the_alias_swap(tmp_path: Path, store: CoordinationStore) -> None:
    """The whole guarantee: a driver whose lock was taken over cannot move the alias."""
    cat = AliasCatalogue(tmp_path / "index")
    old = store.locks.acquire("a", "driver-old", ttl_s=300)
    expire(store, "a")
    new = store.locks.acquire("a", "driver-new", ttl_s=300)
    cat.swap("a", "a_v2", None, fence=new)
    with pytest.raises(LockLost):
        cat.swap("a", "a_v1", "a_v2", fence=old)
    assert cat.get("a") == "a_v2"
