"""The write-ahead log of writes made in place, on every store (coordination/write_ahead.py)."""

from __future__ import annotations

import pytest

from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.write_ahead import Written
from sparkindex.errors import LockLost
from tests.coordination.helpers import age_heartbeat, new_job


def claimed(store: CoordinationStore) -> tuple[str, str, int]:
    job_id, [pid] = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "w1", "run-1", 60)
    assert rec is not None
    return job_id, pid, rec.claim_token


def ids(docs: list[Written]) -> list[str]:
    return [d.id for d in docs]


def test_what_the_cursor_does_not_cover_is_unacknowledged(store: CoordinationStore) -> None:
    job_id, pid, token = claimed(store)
    wal = store.write_ahead
    wal.record(job_id, pid, token, 1, None, [Written("1"), Written("2")], 1)
    wal.record(job_id, pid, token, 2, (2,), [Written("3", "r3", 7), Written("4")], 1)
    wal.record(job_id, pid, token, 3, (4,), [Written("5")], 1)

    assert ids(wal.unacknowledged(pid, token, None)) == ["1", "2", "3", "4", "5"]
    assert wal.unacknowledged(pid, token, (2,)) == [Written("3", "r3", 7), Written("4"), Written("5")]
    assert ids(wal.unacknowledged(pid, token, (4,))) == ["5"]
    assert wal.unacknowledged(pid, token, (5,)) == [], "the end of the last batch: everything acknowledged"
    assert wal.unacknowledged(pid, token - 1, None) == [], "a claim sees nothing of later claims"

    # batch 4 is recorded once 1 and 2 are acknowledged: their entries go
    wal.record(job_id, pid, token, 4, (5,), [Written("6")], 3)
    assert wal.entries(pid) == [(token, 3), (token, 4)]


def test_a_redo_sees_every_earlier_claim_in_order_and_one_copy_per_id(store: CoordinationStore) -> None:
    job_id, pid, first = claimed(store)
    wal = store.write_ahead
    wal.record(job_id, pid, first, 1, None, [Written("a")], 1)
    wal.record(job_id, pid, first, 2, ("a",), [Written("b", None, 3), Written("c")], 1)
    store.partition_rows.release(pid, first)
    rec = store.partition_rows.claim(pid, "w2", "run-2", 60)
    assert rec is not None and rec.claim_token == first + 1 and rec.claims == 2
    # a rewind of the second claim re-sent "b" with a newer version before the first's were forgotten
    wal.record(job_id, pid, rec.claim_token, 1, ("a",), [Written("b", None, 5)], 1)

    assert wal.unacknowledged(pid, rec.claim_token, ("a",)) == [Written("b", None, 5), Written("c")]

    wal.forget(pid, rec.claim_token, upto_seq=0)  # undone: the earlier claim's entries go, ours stay
    assert wal.entries(pid) == [(rec.claim_token, 1)]
    wal.forget(pid, rec.claim_token, upto_seq=1)
    assert wal.entries(pid) == []


def test_a_claim_taken_over_records_nothing_and_is_told(store: CoordinationStore) -> None:
    job_id, pid, token = claimed(store)
    store.partition_rows.release(pid, token)
    taken = store.partition_rows.claim(pid, "w2", "run-2", 60)
    assert taken is not None

    with pytest.raises(LockLost, match="no longer holds it"):
        store.write_ahead.record(job_id, pid, token, 1, None, [Written("x")], 1)
    assert store.write_ahead.entries(pid) == []


@pytest.mark.parametrize("end", ["reclaimed", "closed", "released"])
def test_a_claim_no_longer_processing_records_nothing(store: CoordinationStore, end: str) -> None:
    """The driver reclaimed the partition (same token, back to PENDING), or the claim parked or
    gave it back: the token alone still matches, but the claim no longer holds the partition."""
    job_id, pid, token = claimed(store)
    if end == "reclaimed":
        age_heartbeat(store, pid)
        assert store.partition_resets.reclaim_stale(job_id, 60, 3) == (1, 0)
    elif end == "closed":
        store.partition_rows.close_partition(pid, token, reopen_after_s=1e9)
    else:
        store.partition_rows.release(pid, token)
    assert store.partition_rows.partition(pid).claim_token == token

    with pytest.raises(LockLost, match="no longer holds it"):
        store.write_ahead.record(job_id, pid, token, 1, None, [Written("x")], 1)
    assert store.write_ahead.entries(pid) == []


def test_a_batch_of_large_ids_fits_and_a_job_forgets_its_entries(store: CoordinationStore) -> None:
    job_id, pid, token = claimed(store)
    big = [Written(f"{i:06d}-" + "x" * 60, f"parent-{i}", i) for i in range(5000)]  # about 450 KB of JSON
    store.write_ahead.record(job_id, pid, token, 1, ("k", 1), big, 1)
    assert store.write_ahead.unacknowledged(pid, token, ("k", 1)) == big
    other_job, [other] = new_job(store, 1)
    rec = store.partition_rows.claim(other, "w", "run", 60)
    assert rec is not None
    store.write_ahead.record(other_job, other, rec.claim_token, 1, None, [Written("y")], 1)

    store.write_ahead.forget_job(job_id)
    assert store.write_ahead.entries(pid) == []
    assert store.write_ahead.entries(other) == [(rec.claim_token, 1)]
    store.write_ahead.forget(other)
    assert store.write_ahead.entries(other) == []
