"""The embedded Tantivy target: versions, aliases, pruning, upserts, scans, search, and many writers."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import orjson
import pytest

from sparkindex.errors import LockLost, PermanentError
from sparkindex.keys import sort_key
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

MAPPING = {"properties": {"name": {"type": "text"}, "stock": {"type": "long"}}}


def doc(doc_id: str, name: str, stock: int = 1) -> BulkItem:
    return BulkItem(doc_id, orjson.dumps({"name": name, "stock": stock}), f"h-{doc_id}-{name}")


@pytest.fixture
def target(tmp_path: Path) -> TantivyTarget:
    return TantivyTarget(TantivyTargetConfig(root=tmp_path))


def test_create_version_numbers_versions(target: TantivyTarget) -> None:
    assert target.list_versions("t") == []
    assert target.create_version("t", MAPPING) == "t_v1"
    assert target.create_version("t", MAPPING) == "t_v2"
    assert target.create_version("other", MAPPING) == "other_v1"
    assert target.list_versions("t") == ["t_v1", "t_v2"]
    assert target.version_exists("t_v2") and not target.version_exists("t_v3")
    assert target.count("t_v1") == 0


def test_versions_sort_numerically(target: TantivyTarget) -> None:
    names = [target.create_version("t", MAPPING) for _ in range(11)]
    assert names[-1] == "t_v11"
    assert target.list_versions("t") == [f"t_v{n}" for n in range(1, 12)]


def test_next_version_after_a_deleted_one(target: TantivyTarget) -> None:
    target.create_version("t", MAPPING)
    target.create_version("t", MAPPING)
    target.delete_version("t_v1")
    assert target.list_versions("t") == ["t_v2"]
    assert target.create_version("t", MAPPING) == "t_v3"


def test_swap_alias_and_alias_target(target: TantivyTarget) -> None:
    v1 = target.create_version("t", MAPPING)
    v2 = target.create_version("t", MAPPING)
    target.bulk(v1, [doc("1", "old")])
    target.bulk(v2, [doc("1", "new"), doc("2", "new")])
    assert target.alias_target("t") is None
    target.swap("t", v1, None, fence=1)
    assert target.alias_target("t") == v1
    assert target.count("t") == 1  # reads through the alias
    target.swap("t", v2, v1, fence=2)
    assert target.alias_target("t") == v2
    assert target.count("t") == 2
    # a fresh instance (another process) sees the same alias
    assert TantivyTarget(TantivyTargetConfig(root=target.root)).alias_target("t") == v2


def test_swap_alias_refuses_missing_index_and_old_fence(target: TantivyTarget) -> None:
    v1 = target.create_version("t", MAPPING)
    v2 = target.create_version("t", MAPPING)
    with pytest.raises(PermanentError):
        target.swap("t", "t_v9", None, fence=1)
    assert target.alias_target("t") is None
    target.swap("t", v1, None, fence=3)
    with pytest.raises(LockLost):
        target.swap("t", v2, v1, fence=2)
    assert target.alias_target("t") == v1


def test_swap_is_a_compare_and_swap_on_the_previous_index(target: TantivyTarget) -> None:
    """Two jobs read the alias at v1; the second to swap finds it moved and is refused."""
    v1, v2, v3 = (target.create_version("t", MAPPING) for _ in range(3))
    target.swap("t", v1, None, fence=1)
    target.swap("t", v2, v1, fence=2)
    with pytest.raises(LockLost, match="not 't_v1'"):
        target.swap("t", v3, v1, fence=2)
    assert target.alias_target("t") == v2


def test_a_fence_recorded_at_lock_time_refuses_the_earlier_holder(target: TantivyTarget) -> None:
    """Driver A checked its lock (token 1); then its lock expired and B acquired it (token 2) and
    recorded the token, but has not swapped yet. A's swap must be refused although no swap ran."""
    v1 = target.create_version("t", MAPPING)
    target.observe_fence("t", 1)  # A acquires
    target.observe_fence("t", 2)  # A's lock expires, B acquires: nothing swapped in between
    with pytest.raises(LockLost, match="older than 2"):
        target.swap("t", v1, None, fence=1)
    assert target.alias_target("t") is None
    target.swap("t", v1, None, fence=2)
    assert target.alias_target("t") == v1


def test_prune_keeps_newest_and_never_the_alias_target(target: TantivyTarget) -> None:
    versions = [target.create_version("t", MAPPING) for _ in range(5)]
    target.swap("t", versions[0], None, fence=1)  # the alias still points at the oldest
    doomed = target.prune_versions("t", keep=2)
    assert doomed == ["t_v2", "t_v3"]
    assert target.list_versions("t") == ["t_v1", "t_v4", "t_v5"]
    assert not (target.root / "t_v2").exists()
    assert target.alias_target("t") == "t_v1"


def test_prune_with_alias_on_newest(target: TantivyTarget) -> None:
    for _ in range(4):
        target.create_version("t", MAPPING)
    target.swap("t", "t_v4", None, fence=1)
    assert target.prune_versions("t", keep=1) == ["t_v1", "t_v2", "t_v3"]
    assert target.list_versions("t") == ["t_v4"]
    assert target.prune_versions("t", keep=1) == []


def test_prune_leaves_other_aliases_alone(target: TantivyTarget) -> None:
    for _ in range(3):
        target.create_version("t", MAPPING)
    target.create_version("t_x", MAPPING)  # another alias whose name starts like ours
    target.prune_versions("t", keep=1)
    assert target.list_versions("t") == ["t_v3"]
    assert target.list_versions("t_x") == ["t_x_v1"]


def test_delete_aliased_version_is_refused(target: TantivyTarget) -> None:
    v1 = target.create_version("t", MAPPING)
    target.bulk(v1, [doc("1", "kept")])
    target.swap("t", v1, None, fence=1)
    with pytest.raises(PermanentError) as info:
        target.delete_version(v1)
    assert "'t'" in str(info.value)
    assert target.version_exists(v1)
    assert target.count(v1) == 1


def test_bulk_upserts_by_id(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    first = target.bulk(ix, [doc("1", "first version"), doc("2", "other")])
    assert [r.ok for r in first] == [True, True]
    second = target.bulk(ix, [doc("1", "second version")])
    assert [(r.id, r.ok) for r in second] == [("1", True)]
    assert target.count(ix) == 2
    hits = {h.id: h for h in target.search(ix, "version")}
    assert set(hits) == {"1"}
    assert hits["1"].source == {"name": "second version", "stock": 1}
    assert dict(target.scan_hashes(ix))["1"] == "h-1-second version"


def test_bulk_same_id_twice_in_one_batch_keeps_the_last(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    target.bulk(ix, [doc("1", "early"), doc("1", "late")])
    assert target.count(ix) == 1
    assert dict(target.scan_hashes(ix)) == {"1": "h-1-late"}


def test_bulk_results_are_in_order(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    docs = [doc(str(i), f"n{i}") for i in range(20)]
    docs[7] = BulkItem("7", orjson.dumps({"name": "bad", "stock": "x"}), "h")
    results = target.bulk(ix, docs)
    assert [r.id for r in results] == [d.id for d in docs]
    assert [r.ok for r in results] == [i != 7 for i in range(20)]
    assert target.count(ix) == 19


def test_scan_hashes_returns_every_id_and_hash(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    assert list(target.scan_hashes(ix)) == []
    docs = [doc(str(i), f"name {i}", i) for i in range(250)]
    target.bulk(ix, docs[:100])
    target.bulk(ix, docs[100:])
    scanned = list(target.scan_hashes(ix))
    assert len(scanned) == 250
    assert dict(scanned) == {d.id: d.hash for d in docs}


def test_scan_hashes_by_key_range_and_by_ids(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    keys = [-3, 0, 7, 10, 99, 1000]  # numeric order differs from the ids' text order
    target.bulk(ix, [BulkItem(str(k), b"{}", f"h{k}", sort_key=sort_key([k])) for k in keys])
    lo, hi = sort_key([0]), sort_key([99])
    assert sorted(int(i) for i, _ in target.scan_hashes(ix, key_range=(lo, hi))) == [0, 7, 10]
    assert sorted(int(i) for i, _ in target.scan_hashes(ix, key_range=(None, lo))) == [-3]
    assert sorted(int(i) for i, _ in target.scan_hashes(ix, key_range=(hi, None))) == [99, 1000]
    assert len(list(target.scan_hashes(ix, key_range=(None, None)))) == len(keys)
    assert dict(target.scan_hashes(ix, ids=["7", "99"], key_range=(lo, hi))) == {"7": "h7"}
    with pytest.raises(ValueError, match="not a sort key"):
        list(target.scan_hashes(ix, key_range=("x] OR *", None)))


def test_search_finds_by_a_word_in_a_text_field(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    target.bulk(ix, [doc("1", "Wireless Speaker"), doc("2", "USB cable"), doc("3", "wired speaker stand")])
    target.swap("t", ix, None, fence=1)
    assert {h.id for h in target.search("t", "wireless")} == {"1"}
    assert {h.id for h in target.search("t", "speaker")} == {"1", "3"}
    assert target.search("t", "toaster") == []
    (hit,) = target.search(ix, "cable")
    assert hit.id == "2" and hit.source == {"name": "USB cable", "stock": 1} and hit.score > 0
    assert len(target.search("t", "speaker", limit=1)) == 1


def test_reads_of_a_missing_index_are_permanent(target: TantivyTarget) -> None:
    with pytest.raises(PermanentError):
        target.count("nothing_v1")


def test_a_half_created_version_directory_does_not_block_later_runs(target: TantivyTarget) -> None:
    """A crash inside create_version left t_v2/ without its mapping; the next run reuses the number."""
    target.create_version("t", MAPPING)
    (target.root / "t_v2").mkdir()
    (target.root / "t_v2" / "meta.json").write_text("{}")
    assert target.create_version("t", MAPPING) == "t_v2"
    assert target.list_versions("t") == ["t_v1", "t_v2"]
    target.bulk("t_v2", [doc("1", "works")])
    assert target.count("t_v2") == 1


def test_a_rejected_upsert_keeps_the_live_document(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    target.bulk(ix, [doc("1", "live"), doc("2", "other")])
    bad = BulkItem("1", orjson.dumps({"name": "bad", "stock": "not a number"}), "h-bad")
    results = target.bulk(ix, [doc("3", "before"), bad, doc("4", "after")])
    assert [r.ok for r in results] == [True, False, True]
    assert dict(target.scan_hashes(ix)) == {"1": "h-1-live", "2": "h-2-other", "3": "h-3-before", "4": "h-4-after"}


def test_deletes_and_hashes_by_id(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    target.bulk(ix, [doc(str(i), f"n{i}") for i in range(5)])
    target.bulk(ix, [BulkItem("2", op="delete"), BulkItem("9", op="delete")])
    assert sorted(i for i, _ in target.scan_hashes(ix)) == ["0", "1", "3", "4"]
    assert dict(target.scan_hashes(ix, ids=["1", "2", "4"])) == {"1": "h-1-n1", "4": "h-4-n4"}
    assert list(target.scan_hashes(ix, ids=[])) == []


# -- several writer processes on one version -------------------------------------------------------
def _write_range(root: str, index: str, start: int, stop: int, batch: int, barrier: object, out: object) -> None:
    """Spawned writer: open the target, wait for the other writer, then bulk-write ids [start, stop)."""
    target = TantivyTarget(TantivyTargetConfig(root=Path(root), writer_heap_mb=16, writer_threads=1))
    ok, error = 0, None
    try:
        barrier.wait(timeout=120)  # type: ignore[attr-defined]
        for lo in range(start, stop, batch):
            docs = [doc(str(i), f"item {i}", i) for i in range(lo, min(stop, lo + batch))]
            ok += sum(r.ok for r in target.bulk(index, docs))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        error = repr(exc)
    out.put((start, ok, error))  # type: ignore[attr-defined]


def test_two_processes_writing_one_version_lose_nothing(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path))
    ix = target.create_version("t", MAPPING)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    ranges = [(0, 600, 50), (10_000, 10_400, 40)]  # 12 + 10 bulks, interleaved
    procs = [ctx.Process(target=_write_range, args=(str(tmp_path), ix, a, b, n, barrier, out)) for a, b, n in ranges]
    for proc in procs:
        proc.start()
    try:
        reports = sorted(out.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=60)
    assert [err for _, _, err in reports] == [None, None]
    written = [ok for _, ok, _ in reports]
    assert written == [600, 400]
    assert target.count(ix) == sum(written)
    ids = {i for i, _ in target.scan_hashes(ix)}
    assert ids == {str(i) for i in range(600)} | {str(i) for i in range(10_000, 10_400)}


def test_elasticsearch_numeric_and_date_variants_index_natively(target: TantivyTarget) -> None:
    """Mapping overrides may name ES types such as integer or date_nanos; Tantivy indexes them as
    its own integer, float and date fields instead of refusing every document."""
    mapping = {
        "properties": {
            "n": {"type": "integer"},
            "s": {"type": "short"},
            "f": {"type": "float"},
            "x": {"type": "scaled_float"},
            "d": {"type": "date_nanos"},
        }
    }
    ix = target.create_version("t", mapping)
    body = {"n": 7, "s": 2, "f": 1.5, "x": 2.25, "d": "2024-05-01T10:00:00"}
    results = target.bulk(ix, [BulkItem("1", orjson.dumps(body), "h1", fields=body)])
    assert [r.ok for r in results] == [True], results
    assert target.count(ix) == 1
