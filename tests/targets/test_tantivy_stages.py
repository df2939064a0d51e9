"""Staged builds on real Tantivy: what a version adopts is exactly the stages of the claims that
completed their partitions, once, whatever else was left behind.

* Two sealed stages of one partition (a claim that lost to a later one sealed too) and an
  unsealed one (an attempt that died): only the named stage is adopted, no id twice.
* An adoption cut short after the version's meta.json was written is done again harmlessly.
* A document that does not fit the mapping is rejected per item; the others are staged.
* Writes through the writer service before and after adoption (a catch-up after the count
  check) see the adopted documents: an upsert replaces a staged document instead of adding one.
"""

from __future__ import annotations

from pathlib import Path

from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from sparkindex.targets.tantivy import stages as stage_files
from tests.targets.test_conformance import MAPPING, doc


def target_at(tmp_path: Path) -> TantivyTarget:
    return TantivyTarget(TantivyTargetConfig(root=tmp_path / "index", writer_heap_mb=32, writer_threads=1))


def staged(target: TantivyTarget, index: str, name: str, items: list[BulkItem], seal: bool = True) -> None:
    stage = target.open_stage(index, name)
    assert stage is not None
    assert stage.add(items) == []
    if seal:
        stage.seal()


def ids_of(target: TantivyTarget, index: str) -> list[str]:
    return sorted((i for i, _ in target.scan_hashes(index)), key=int)


def test_only_the_completing_claims_stages_are_adopted(tmp_path: Path) -> None:
    target = target_at(tmp_path)
    index = target.create_version("shop", MAPPING)
    staged(target, index, "p1.1.1", [doc(i) for i in range(0, 50)])  # lost its claim after sealing
    staged(target, index, "p1.2.1", [doc(i) for i in range(0, 50)])  # the claim that completed p1
    staged(target, index, "p2.1.1", [doc(i) for i in range(50, 80)])
    staged(target, index, "p3.1.1", [doc(i) for i in range(80, 90)], seal=False)  # died mid-way

    added = target.adopt_stages(index, {"p1.2.1", "p2.1.1"})

    assert added == 80
    assert target.count(index) == 80
    assert ids_of(target, index) == [str(i) for i in range(80)], "each id once, nothing of p3"
    assert not stage_files.stages_dir(tmp_path / "index" / index).exists(), "leftover stages are removed"
    target.finish_version(index)
    assert target.count(index) == 80


def test_an_adoption_cut_short_is_done_again_without_duplicates(tmp_path: Path) -> None:
    target = target_at(tmp_path)
    index = target.create_version("shop", MAPPING)
    staged(target, index, "p1.1.1", [doc(i) for i in range(0, 40)])
    staged(target, index, "p2.1.1", [doc(i) for i in range(40, 60)])
    index_dir = tmp_path / "index" / index
    # the first adoption wrote meta.json, then the process died before removing the stages
    assert stage_files.adopt(index_dir, {"p1.1.1", "p2.1.1"}) == 60
    assert target.adopt_stages(index, {"p1.1.1", "p2.1.1"}) == 0, "segments already listed are skipped"
    assert target.count(index) == 60
    assert ids_of(target, index) == [str(i) for i in range(60)]


def test_a_document_the_mapping_rejects_fails_alone(tmp_path: Path) -> None:
    target = target_at(tmp_path)
    index = target.create_version("shop", MAPPING)
    stage = target.open_stage(index, "p1.1.1")
    assert stage is not None
    bad = BulkItem("bad", b'{"n":"not a number","name":"x","tag":"t"}', "h", sort_key="00")
    [rejected] = stage.add([doc(1), bad, doc(2)])
    assert rejected.id == "bad" and not rejected.ok and rejected.error_class
    stage.seal()
    assert target.adopt_stages(index, {"p1.1.1"}) == 2
    assert ids_of(target, index) == ["1", "2"]


def test_service_writes_around_an_adoption_see_the_staged_documents(tmp_path: Path) -> None:
    target = target_at(tmp_path)
    index = target.create_version("shop", MAPPING)
    assert all(r.ok for r in target.bulk(index, [doc(100)]))  # a writer service now runs on the version
    staged(target, index, "p1.1.1", [doc(i) for i in range(0, 30)])

    assert target.adopt_stages(index, {"p1.1.1"}) == 30  # stops the service first
    target.finish_version(index)
    assert target.count(index) == 31

    # a catch-up after the count check: an upsert of a staged document replaces it
    assert all(r.ok for r in target.bulk(index, [doc(7, name="renamed"), BulkItem("8", op="delete")]))
    target.finish_version(index)
    assert target.count(index) == 30
    ids = ids_of(target, index)
    assert len(ids) == len(set(ids)) == 30 and "8" not in ids
    [hit] = [h for h in target.search(index, '_id:"7"', limit=5) if h.id == "7"]
    assert hit.source["name"] == "renamed"


def test_staged_builds_can_be_turned_off(tmp_path: Path) -> None:
    config = TantivyTargetConfig(root=tmp_path / "index", staged_builds=False)
    target = TantivyTarget(config)
    index = target.create_version("shop", MAPPING)
    assert target.open_stage(index, "p1.1.1") is None
    assert target.adopt_stages(index, {"p1.1.1"}) == 0
