"""Verify by range checksums in one process (no Spark): real SQLite shop, real builder, real Tantivy.

The fast path must see everything the comparison by id sees: each kind of drift alone (with its
sample) and all together, a stale document in every one of 1,000 ranges, a row that cannot be
built; a clean index must cost no comparison by id at all; an index built before indexes stored
checks must still be verified (by id, with the reason); and repair must fix what the fast path
found, then verify clean by checksum.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkindex.checksums import document_check
from sparkindex.config.model import Pipeline
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.tombstones import deleted_at, tombstone
from sparkindex.targets.base import BulkItem, StoredDocument
from sparkindex.targets.tantivy import TantivyTarget
from sparkindex.verify.range_checksums import CHECKSUMS, DOCUMENTS
from sparkindex.verify.repair import repair
from sparkindex.verify.verifier import VerifyReport
from tests.e2e.guarantee_helpers import plant_raw, tantivy_body
from tests.e2e.shop import execute, make_shop
from tests.jobs.planting import (
    KINDS,
    built_documents,
    fields_of,
    index_without_spark,
    plant,
    plant_each_kind,
    soft_shop,
    tantivy,
    variant,
    write,
)
from tests.jobs.test_verify_local import WithoutChecks, drift, no_drift, verifier

PRODUCTS = 600
RANGES = 6  # 600 products in partitions of 100


def verify(pipeline: Pipeline, target: TantivyTarget | None = None) -> VerifyReport:
    with verifier(pipeline, target, checks=True) as v:
        [report] = v.run()
    return report


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Pipeline, str]:
    pipeline = make_shop(tmp_path, products=PRODUCTS, partition_size=100)
    return pipeline, index_without_spark(pipeline, "products")


def test_a_clean_index_is_compared_by_figures_alone(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    with tantivy(pipeline) as target:
        assert target.stores_checks(index)
    report = verify(pipeline)
    assert drift(report) == no_drift() and report.clean
    assert (report.path, report.path_reason) == (CHECKSUMS, None)
    assert report.ranges == {"source": RANGES, "index": 0, "compared": RANGES, "matched": RANGES, "descended": 0}
    assert (report.checked, report.index_docs, report.extra_by_count) == (PRODUCTS, PRODUCTS, 0)
    assert report.notes == []


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_drift_makes_its_range_differ_and_is_found(shop: tuple[Pipeline, str], kind: str) -> None:
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    planted = {"missing": "5", "extra": ("8", (10**9,)), "stale": "7", "duplicate": "9"}
    key = "duplicate" if kind == "duplicates" else kind
    plant(pipeline, index, docs, **{key: planted[key]})  # type: ignore[arg-type]
    report = verify(pipeline)
    assert report.path == CHECKSUMS
    assert drift(report) == no_drift(**{kind: 1}), report.samples
    sample = {"missing": "5", "extra": "1000000000", "stale": "7", "duplicates": "9"}[kind]
    assert report.samples[kind] == [sample]
    assert (report.ranges["matched"], report.ranges["descended"]) == (RANGES - 1, 1), report.ranges
    # an extra document is found by its key in the range that differed: no index range is scanned
    assert report.ranges["index"] == 0 and report.extra_by_count == 0, report.ranges


def test_every_kind_at_once_then_repair_leaves_it_clean_by_checksum(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    planted = plant_each_kind(pipeline, index, docs, ("15", "418", "217", "519"), (10**9 + 7,))
    with verifier(pipeline, checks=True) as v:
        result = repair(v, "test-run")
    [before], [after] = result.before, result.after
    assert before.path == CHECKSUMS
    assert drift(before) == no_drift(missing=1, extra=1, stale=1, duplicates=1)
    assert {k: v for k, v in before.samples.items() if v} == planted.samples()
    # the missing in range 1, the stale in 3, the duplicate and the extra (past the last key) in 6;
    # the extra is found by its key there: no range of the index is scanned
    assert (before.ranges["descended"], before.ranges["index"]) == (3, 0), before.ranges
    assert before.repaired == {"indexed": 3, "deleted": 2, "failed": 0}
    assert drift(after) == no_drift() and after.index_docs == PRODUCTS
    assert after.ranges["matched"] == RANGES and after.ranges["descended"] == 0


def test_one_stale_document_in_each_of_a_thousand_ranges_is_found(tmp_path: Path) -> None:
    """The checksum is never a reason to miss drift: every range with a stale document differs."""
    pipeline = make_shop(tmp_path, products=3000, partition_size=3)
    index = index_without_spark(pipeline, "products")
    docs = built_documents(pipeline, "products")
    stale = [str(i) for i in range(1, 3001, 3)]  # the first id of each range of three
    write_stale = [variant(docs[i], i, name=f"changed {i}") for i in stale]
    with tantivy(pipeline) as target:
        write(target, index, write_stale)
    report = verify(pipeline)
    assert report.path == CHECKSUMS
    assert report.ranges["compared"] == 1000, report.ranges
    assert report.ranges["descended"] == 1000 and report.ranges["matched"] == 0
    assert drift(report) == no_drift(stale=1000)
    assert report.samples["stale"] == sorted(stale)[:20]


def test_a_row_that_cannot_be_built_makes_its_range_differ(shop: tuple[Pipeline, str]) -> None:
    pipeline, _ = shop
    execute(pipeline.base_dir / "shop.db", "UPDATE products SET price = 9e999 WHERE id = 42")  # +inf: no JSON
    report = verify(pipeline)
    assert report.path == CHECKSUMS and report.ranges["descended"] == 1
    assert drift(report) == no_drift(stale=1, unbuildable=1)
    assert report.samples["stale"] == report.samples["unbuildable"] == ["42"]


def test_an_index_without_checks_is_compared_by_id_and_says_why(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    plant(pipeline, index, built_documents(pipeline, "products"), stale="7")
    with tantivy(pipeline) as base, WithoutChecks(base.config) as old:
        report = verify(pipeline, old)
    assert report.path == DOCUMENTS
    assert report.path_reason is not None and "stores no range checks" in report.path_reason
    assert report.ranges["compared"] == 0 and report.ranges["source"] == RANGES
    assert drift(report) == no_drift(stale=1)


def test_two_documents_swapping_bodies_make_their_range_differ(shop: tuple[Pipeline, str]) -> None:
    """A body need not hold its key (``exclude`` of the id, a transform): the check covers the id,
    so two documents of one range exchanging bodies change the range's sums."""
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    swapped = [
        BulkItem(a, docs[b].source, docs[b].hash, sort_key=docs[a].sort_key, check=document_check(a, docs[b].source))
        for a, b in (("5", "6"), ("6", "5"))
    ]
    with tantivy(pipeline) as target:
        write(target, index, swapped)
    report = verify(pipeline)
    assert report.path == CHECKSUMS and report.ranges["descended"] == 1
    assert drift(report) == no_drift(stale=2) and report.samples["stale"] == ["5", "6"]


@pytest.mark.parametrize("repairing", [False, True], ids=["verify", "repair"])
def test_a_document_without_a_sort_key_is_found_beside_one_found_key_by_key(
    shop: tuple[Pipeline, str], repairing: bool
) -> None:
    """A document written without a sort key (by an older version) lies in no key range: the
    whole index is scanned for it, and the extra document a range found key by key is neither
    counted twice nor taken for motion."""
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    keyed = variant(docs["8"], "1000000001", sort_key=docs["8"].sort_key + "0", name="keyed extra")  # type: ignore[operator]
    keyless = variant(docs["9"], 'keyless|"é', name="keyless extra")
    keyless = BulkItem(keyless.id, keyless.source, keyless.hash, fields=keyless.fields, check=keyless.check)
    with tantivy(pipeline) as target:
        write(target, index, [keyed, keyless])
    if repairing:
        with verifier(pipeline, checks=True) as v:
            result = repair(v, "test-run")
        [report], [after] = result.before, result.after
        assert report.repaired == {"indexed": 0, "deleted": 2, "failed": 0}
        assert drift(after) == no_drift() and after.index_docs == PRODUCTS and after.notes == []
    else:
        report = verify(pipeline)
    assert report.path == CHECKSUMS and report.ranges["descended"] == 1
    assert drift(report) == no_drift(extra=2), report.notes
    assert report.samples["extra"] == sorted([keyed.id, keyless.id])
    assert not [n for n in report.notes if "changed while verify ran" in n], report.notes


@pytest.mark.parametrize("under", ["another_key", "no_key"])
def test_a_second_copy_of_a_live_id_outside_its_key_is_found_by_id(shop: tuple[Pipeline, str], under: str) -> None:
    """A copy of id 5 under product 250's sort key (a join child that moved parent, its old copy's
    delete lost) or under none: no range's figure counts it as a copy of 5. The key-by-key scan
    finds it (or the counts cannot place it), and the alias is compared again by id, which sees
    what the comparison by id always saw: a duplicate, and a stale copy."""
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    fields = {**fields_of(docs["5"]), "name": "an old copy"}
    body = dumps_document(fields)
    old = dataclasses.replace(
        docs["5"],
        source=body,
        hash=content_hash(body),
        fields=fields,
        sort_key=docs["250"].sort_key if under == "another_key" else None,
        check=document_check("5", body),
    )
    with tantivy(pipeline) as target:
        root = target.root
    # raw: through the writer an id has one copy; an index may still hold two (another routing)
    plant_raw(root, index, [tantivy_body(root, index, old)])
    with verifier(pipeline) as by_id:
        [expected] = by_id.run()
    report = verify(pipeline)
    assert drift(report) == drift(expected) == no_drift(stale=1, duplicates=1)
    assert report.samples["duplicates"] == ["5"]
    assert report.path == DOCUMENTS and report.path_reason is not None
    assert "compared again by id" in report.path_reason
    assert report.ranges["compared"] == RANGES  # the checksums ran first
    with verifier(pipeline, checks=True) as v:
        result = repair(v, "test-run")
    [before], [after] = result.before, result.after
    assert drift(before) == no_drift(stale=1, duplicates=1)
    assert drift(after) == no_drift() and after.index_docs == PRODUCTS
    assert after.path == CHECKSUMS and after.ranges["matched"] == RANGES


@pytest.mark.parametrize("keyless_extra", [False, True], ids=["ranges", "whole_scan"])
@pytest.mark.parametrize("repairing", [False, True], ids=["verify", "repair"])
def test_a_tombstone_in_a_range_compared_key_by_key_is_counted_once(
    tmp_path: Path, keyless_extra: bool, repairing: bool
) -> None:
    """``deletes: soft``: the tombstone of gone row 5 lies in a range that differs (7 is stale),
    which counts it; a keyless extra document then makes the verifier scan the whole index,
    which sees the tombstone again and must not count it twice."""
    pipeline, index = soft_shop(tmp_path, PRODUCTS)
    docs = built_documents(pipeline, "products")
    execute(pipeline.base_dir / "shop.db", "DELETE FROM products WHERE id = 5")
    five = docs["5"]
    stored = StoredDocument(five.id, five.sort_key, five.hash, fields_of(five))
    items = [tombstone(stored, deleted_at(), None), variant(docs["7"], "7", name="stale")]
    if keyless_extra:
        extra = variant(docs["9"], "keyless|x", name="keyless extra")
        items.append(BulkItem(extra.id, extra.source, extra.hash, fields=extra.fields, check=extra.check))
    with tantivy(pipeline) as target:
        write(target, index, items)
    if repairing:
        with verifier(pipeline, checks=True) as v:
            result = repair(v, "test-run")
        [report], [after] = result.before, result.after
        # soft deletes: repair turns the extra document into a tombstone too
        assert drift(after) == no_drift() and after.tombstones == 1 + int(keyless_extra) and after.notes == []
    else:
        report = verify(pipeline)
    assert drift(report) == no_drift(stale=1, extra=int(keyless_extra))
    assert report.tombstones == 1
    assert not [n for n in report.notes if "changed while verify ran" in n], report.notes
