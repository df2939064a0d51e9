"""Dead letters count real write attempts: a redo of the same batch after a takeover is not one."""

from __future__ import annotations

from sparkindex.coordination.store import CoordinationStore

FAIL = [("doc-1", "MapperParsingException", "bad date"), ("doc-2", "MapperParsingException", "bad int")]


def attempts(store: CoordinationStore) -> dict[str, int]:
    return {d.doc_id: d.attempts for d in store.dead_letters.list(alias="products")}


def test_redo_of_the_same_partition_does_not_inflate_attempts(store: CoordinationStore) -> None:
    store.dead_letters.add("job-1", "products", "part-1", FAIL)
    # the worker died before acknowledging its cursor; the partition's new owner redoes the batch
    store.dead_letters.add("job-1", "products", "part-1", [("doc-1", "MapperParsingException", "bad date again")])
    assert attempts(store) == {"doc-1": 1, "doc-2": 1}
    (d1,) = [d for d in store.dead_letters.list(alias="products") if d.doc_id == "doc-1"]
    assert d1.error_message == "bad date again", "the latest error is kept"


def test_a_later_job_is_a_new_attempt(store: CoordinationStore) -> None:
    store.dead_letters.add("job-1", "products", "part-1", FAIL)
    store.dead_letters.add("job-2", "products", "part-9", FAIL[:1])
    store.dead_letters.add("job-2", "products", "part-9", FAIL[:1])  # and its own redo again counts once
    assert attempts(store) == {"doc-1": 2, "doc-2": 1}
    assert store.dead_letters.count("job-2") == 1


def test_explicit_attempt_keys_and_unkeyed_writes(store: CoordinationStore) -> None:
    store.dead_letters.add("df", "products", None, FAIL[:1])
    store.dead_letters.add("df", "products", None, FAIL[:1])  # two DataFrame writes: two attempts
    assert attempts(store) == {"doc-1": 2}
    store.dead_letters.add("df", "products", None, FAIL[:1], attempt="write-7")
    store.dead_letters.add("df", "products", None, FAIL[:1], attempt="write-7")
    assert attempts(store) == {"doc-1": 3}
