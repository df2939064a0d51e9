"""Backoff, retry_transient, and bulk_with_retries against a real Tantivy index."""

from __future__ import annotations

import random
import time
from pathlib import Path

import orjson
import pytest

from sparkindex.errors import PermanentError, TransientError
from sparkindex.retry import Backoff, retry_transient
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from sparkindex.worker.bulk import bulk_with_retries


# -- Backoff ---------------------------------------------------------------------------------------
def test_without_jitter_delays_grow_exponentially_up_to_the_cap() -> None:
    b = Backoff(initial_s=0.5, max_s=10.0, factor=2.0, jitter=0.0, rng=random.Random(1))
    assert [b.next_delay() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert b.attempt == 8


def test_other_factor() -> None:
    b = Backoff(initial_s=1.0, max_s=1000.0, factor=3.0, jitter=0.0)
    assert [b.next_delay() for _ in range(4)] == [1.0, 3.0, 9.0, 27.0]


@pytest.mark.parametrize("jitter", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 42])
def test_jitter_keeps_delays_within_bounds(jitter: float, seed: int) -> None:
    b = Backoff(initial_s=0.1, max_s=5.0, factor=2.0, jitter=jitter, rng=random.Random(seed))
    for attempt in range(30):
        base = min(5.0, 0.1 * 2.0**attempt)
        d = b.next_delay()
        assert base * (1 - jitter) - 1e-12 <= d <= base + 1e-12, (attempt, d, base)
        assert d <= 5.0


def test_jitter_actually_varies_and_is_reproducible_with_a_seed() -> None:
    def delays(seed: int) -> list[float]:
        b = Backoff(initial_s=1.0, max_s=1.0, jitter=1.0, rng=random.Random(seed))
        return [b.next_delay() for _ in range(20)]

    first = delays(7)
    assert len(set(first)) > 10, "full jitter should spread the delays"
    assert first == delays(7)
    assert first != delays(8)


def test_deadline_caps_delays() -> None:
    b = Backoff(initial_s=10.0, max_s=100.0, jitter=0.0, deadline_s=2.0)
    assert not b.expired()
    for _ in range(5):
        d = b.next_delay()
        assert 0.0 <= d <= 2.0


def test_passed_deadline_gives_zero_delay_and_is_expired() -> None:
    b = Backoff(initial_s=10.0, max_s=100.0, jitter=0.0, deadline_s=0.0)
    assert b.expired()
    assert b.next_delay() == 0.0


def test_no_deadline_never_expires() -> None:
    b = Backoff(jitter=0.0)
    for _ in range(50):
        b.next_delay()
    assert not b.expired()


# -- retry_transient -------------------------------------------------------------------------------
class Flaky:
    """Fails with *exc* the first *failures* calls, then returns *value*."""

    def __init__(self, failures: int, exc: Exception, value: str = "done") -> None:
        self.failures = failures
        self.exc = exc
        self.value = value
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return self.value


def test_retry_transient_retries_until_success() -> None:
    op = Flaky(2, TransientError("busy"))
    slept: list[float] = []
    backoff = Backoff(initial_s=0.5, max_s=30, jitter=0.0)
    assert retry_transient(op, "op", attempts=3, backoff=backoff, sleep=slept.append) == "done"
    assert op.calls == 3
    assert slept == [0.5, 1.0]


def test_retry_transient_gives_up_after_attempts() -> None:
    err = TransientError("still busy")
    op = Flaky(100, err)
    slept: list[float] = []
    backoff = Backoff(initial_s=0.5, max_s=30, jitter=0.0)
    with pytest.raises(TransientError) as info:
        retry_transient(op, "op", attempts=3, backoff=backoff, sleep=slept.append)
    assert info.value is err
    assert op.calls == 4, "one first try plus three retries"
    assert slept == [0.5, 1.0, 2.0]


def test_retry_transient_zero_attempts_means_one_try() -> None:
    op = Flaky(1, TransientError("busy"))
    slept: list[float] = []
    with pytest.raises(TransientError):
        retry_transient(op, "op", attempts=0, backoff=Backoff(jitter=0.0), sleep=slept.append)
    assert op.calls == 1 and slept == []


@pytest.mark.parametrize("exc", [PermanentError("nope"), ValueError("bug")], ids=["permanent", "other"])
def test_non_transient_errors_are_not_retried(exc: Exception) -> None:
    op = Flaky(1, exc)
    slept: list[float] = []
    with pytest.raises(type(exc)):
        retry_transient(op, "op", attempts=5, backoff=Backoff(jitter=0.0), sleep=slept.append)
    assert op.calls == 1 and slept == []


def test_retry_transient_stops_at_the_deadline() -> None:
    op = Flaky(100, TransientError("busy"))
    slept: list[float] = []
    with pytest.raises(TransientError):
        retry_transient(op, "op", attempts=10, backoff=Backoff(deadline_s=0.0), sleep=slept.append)
    assert op.calls == 1 and slept == []


# -- bulk_with_retries on a real Tantivy index -----------------------------------------------------
MAPPING = {"properties": {"name": {"type": "text"}, "stock": {"type": "long"}}}


def doc(doc_id: str, body: dict[str, object]) -> BulkItem:
    raw = orjson.dumps(body)
    return BulkItem(doc_id, raw, f"hash-{doc_id}")


def test_bulk_with_retries_returns_rejected_document_and_writes_the_rest(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path))
    index = target.create_version("t", MAPPING)
    docs = [doc(str(i), {"name": f"widget {i}", "stock": i}) for i in range(5)]
    docs.insert(2, doc("bad", {"name": "broken widget", "stock": "plenty"}))
    slept: list[float] = []

    outcome = bulk_with_retries(target, index, docs, retries=3, backoff=Backoff(jitter=0.0), sleep=slept.append)

    assert outcome.success == 5
    assert [f[0] for f in outcome.failures] == ["bad"]
    _, error_class, message = outcome.failures[0]
    assert error_class == "MappingRejected"
    assert "stock" in message
    assert slept == [], "a permanent item failure is not retried"
    assert target.count(index) == outcome.success
    assert {i for i, _ in target.scan_hashes(index)} == {"0", "1", "2", "3", "4"}


def test_bulk_with_retries_invalid_json_is_a_document_failure(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path))
    index = target.create_version("t", MAPPING)
    docs = [doc("1", {"name": "ok", "stock": 1}), BulkItem("2", b"{not json", "h"), BulkItem("3", b"[1]", "h")]
    outcome = bulk_with_retries(target, index, docs, retries=1, backoff=Backoff(jitter=0.0), sleep=lambda _s: None)
    assert outcome.success == 1
    assert sorted((f[0], f[1]) for f in outcome.failures) == [("2", "InvalidJSON"), ("3", "InvalidJSON")]
    assert target.count(index) == 1


def test_bulk_with_retries_to_a_missing_index_is_permanent(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path))
    slept: list[float] = []
    with pytest.raises(PermanentError):
        bulk_with_retries(
            target, "t_v9", [doc("1", {"name": "x"})], retries=3, backoff=Backoff(jitter=0.0), sleep=slept.append
        )
    assert slept == []


class HeldWriterLock:
    """Holds Tantivy's own writer lock of *index* from this process (a stray writer), so that the
    index's writer service cannot open its writer and the target is unavailable until release."""

    def __init__(self, target: TantivyTarget, index: str) -> None:
        idx, _ = target._index(index)
        self.writer = idx.writer(16 * 1024 * 1024, 1)

    def release(self) -> None:
        self.writer.wait_merging_threads()  # consumes and drops the writer, releasing the lock


def test_bulk_with_retries_retries_a_busy_writer_lock(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path, lock_timeout_s=0.05))
    index = target.create_version("t", MAPPING)
    held = HeldWriterLock(target, index)
    slept: list[float] = []

    def sleep(delay: float) -> None:
        slept.append(delay)
        if len(slept) == 2:
            held.release()  # the stray writer goes away during our second pause...
            client = target._writer_client(index)
            deadline = time.monotonic() + 30
            while (sock := client.connect(start=False)) is None:  # ...and the waiting service opens
                assert time.monotonic() < deadline, "the writer service never came up"
                time.sleep(0.01)
            sock.close()

    docs = [doc(str(i), {"name": f"n{i}", "stock": i}) for i in range(3)]
    outcome = bulk_with_retries(target, index, docs, retries=5, backoff=Backoff(initial_s=0.5, jitter=0.0), sleep=sleep)
    assert outcome.success == 3 and outcome.failures == []
    assert slept == [0.5, 1.0]
    assert target.count(index) == 3


def test_bulk_with_retries_raises_when_retries_are_exhausted(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path, lock_timeout_s=0.05))
    index = target.create_version("t", MAPPING)
    held = HeldWriterLock(target, index)
    slept: list[float] = []
    try:
        with pytest.raises(TransientError):
            bulk_with_retries(
                target,
                index,
                [doc("1", {"name": "x", "stock": 1})],
                retries=2,
                backoff=Backoff(initial_s=0.5, jitter=0.0),
                sleep=slept.append,
            )
    finally:
        held.release()
    assert slept == [0.5, 1.0]
    assert target.count(index) == 0
