"""The second pass by id: an index holding copies of live documents that no key range places (under
another document's sort key, or under none) is compared again by id, and the report adds up right.

In one process (no Spark): a real SQLite shop, a real builder, real Tantivy. Each case plants what
the figures alone cannot see, or what must *not* send a clean index to the slow path: rows a sync
inserts while verify runs, and a read replica one insert behind its primary. Repair's merged
report counts each drift once: what its first pass fixed, what only the second saw, and rows no
repair can build counted once, not by both passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.checksums import document_check
from sparkindex.config.model import Pipeline
from sparkindex.documents.builder import BuiltDocument
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.planning import resolve_plans
from sparkindex.keys import document_id, sort_key
from sparkindex.resources import open_source_url, open_store
from sparkindex.targets.base import BulkItem
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.range_checksums import CHECKSUMS, DOCUMENTS
from sparkindex.verify.repair import repair
from sparkindex.verify.verifier import Verifier, VerifyReport
from tests.e2e.guarantee_helpers import finish_and_wait, plant_raw, tantivy_body
from tests.e2e.shop import execute, make_shop
from tests.jobs.planting import built_documents, fields_of, index_without_spark, soft_shop, tantivy, variant, write
from tests.jobs.test_verify_local import drift, no_drift, verifier

PRODUCTS = 600


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Pipeline, str]:
    pipeline = make_shop(tmp_path, products=PRODUCTS, partition_size=100)
    return pipeline, index_without_spark(pipeline, "products")


def old_copy(doc: BuiltDocument, under: str | None) -> BuiltDocument:
    """An older copy of *doc* (its check its own) under sort key *under*: what a lost delete leaves."""
    fields = {**fields_of(doc), "name": "an old copy"}
    body = dumps_document(fields)
    check = document_check(doc.id, body)
    return dataclasses.replace(doc, source=body, hash=content_hash(body), fields=fields, sort_key=under, check=check)


def plant_copy(pipeline: Pipeline, index: str, doc: BuiltDocument) -> None:
    """Written raw: through the writer an id has one copy; an index may still hold two (routing)."""
    with tantivy(pipeline) as target:
        finish_and_wait(target, index)
        root = target.root
    plant_raw(root, index, [tantivy_body(root, index, doc)])


def both_passes(pipeline: Pipeline) -> tuple[VerifyReport, VerifyReport]:
    with verifier(pipeline, checks=True) as v:
        result = repair(v, "test-run")
    [before], [after] = result.before, result.after
    return before, after


def insert_product(pipeline: Pipeline, new_id: int, like: int = 9) -> None:
    with contextlib.closing(sqlite3.connect(pipeline.base_dir / "shop.db")) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(products)")]
        chosen = ", ".join("?" if c == "id" else c for c in columns)
        conn.execute(
            f"INSERT INTO products ({', '.join(columns)}) SELECT {chosen} FROM products WHERE id = ?", (new_id, like)
        )
        conn.commit()


def sync_insert(pipeline: Pipeline, index: str, new_id: int) -> None:
    """As a sync does it: the row committed, then its document indexed."""
    insert_product(pipeline, new_id)
    with tantivy(pipeline) as target:
        write(target, index, [built_documents(pipeline, "products")[str(new_id)].bulk_item()])


def test_repair_counts_what_its_first_pass_fixed_once(shop: tuple[Pipeline, str]) -> None:
    """7 stale and 300 missing (fixed by the first pass), a copy of 5 under 250's key (seen by
    the second): each counted once, and the index clean after."""
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    with tantivy(pipeline) as target:
        write(target, index, [variant(docs["7"], "7", name="stale"), BulkItem("300", op="delete")])
    plant_copy(pipeline, index, old_copy(docs["5"], docs["250"].sort_key))
    before, after = both_passes(pipeline)
    assert before.path == DOCUMENTS and before.path_reason is not None
    assert drift(before) == no_drift(stale=2, missing=1, duplicates=1), before.samples
    assert drift(after) == no_drift() and after.index_docs == PRODUCTS


def test_a_row_no_repair_can_build_is_counted_once_across_both_passes(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    execute(pipeline.base_dir / "shop.db", "UPDATE products SET price = 9e999 WHERE id = 42")  # +inf: no JSON
    plant_copy(pipeline, index, old_copy(docs["5"], docs["250"].sort_key))
    with verifier(pipeline, checks=True) as v:
        [plain] = v.run()
    assert drift(plain) == no_drift(stale=2, duplicates=1, unbuildable=1)
    before, after = both_passes(pipeline)
    assert drift(before) == drift(plain), before.samples
    assert drift(after) == no_drift(stale=1, unbuildable=1)  # 42's old copy: nothing can replace it


@pytest.mark.parametrize("repairing", [False, True], ids=["verify", "repair"])
def test_soft_deletes_a_keyless_live_copy_beside_an_extra_the_repair_tombstones(
    tmp_path: Path, repairing: bool
) -> None:
    """``deletes: soft``: repair turns the extra document into a tombstone, which the whole-index
    scan then sees; that must not hide the keyless copy of 5 from the count."""
    pipeline, index = soft_shop(tmp_path, PRODUCTS)
    docs = built_documents(pipeline, "products")
    with tantivy(pipeline) as target:
        write(target, index, [variant(docs["8"], document_id((10**9,)), sort_key=sort_key((10**9,)))])
    plant_copy(pipeline, index, old_copy(docs["5"], None))
    if repairing:
        before, after = both_passes(pipeline)
        assert drift(after) == no_drift()
    else:
        with verifier(pipeline, checks=True) as v:
            [before] = v.run()
    assert drift(before) == no_drift(extra=1, stale=1, duplicates=1)
    assert before.path == DOCUMENTS


def test_a_row_inserted_while_its_range_is_compared_is_not_a_foreign_copy(shop: tuple[Pipeline, str]) -> None:
    """Range 6 differs (600 is stale); row 601 is inserted and indexed after the range's pages
    were built and before its keys are listed: its copy lies under its own key."""
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    with tantivy(pipeline) as target:
        write(target, index, [variant(docs["600"], "600", name="stale")])
    with verifier(pipeline, checks=True) as v:
        listed, inserted = v.target.key_checks, []

        def key_checks(name: str, bounds: Any) -> Any:
            if not inserted:
                inserted.append(601)
                sync_insert(pipeline, index, 601)
            return listed(name, bounds)

        v.target.key_checks = key_checks  # type: ignore[method-assign,assignment]
        [report] = v.run()
    assert inserted == [601]
    assert drift(report) == no_drift(stale=1)
    assert report.path == CHECKSUMS, report.path_reason


def test_a_read_replica_one_insert_behind_keeps_the_checksum_path(shop: tuple[Pipeline, str], tmp_path: Path) -> None:
    """The index has row 601, as the sync keeps it; the replica has not replayed its insert yet.
    The primary has the row: its copy is live, not extra, and not unplaced."""
    pipeline, index = shop
    replica = tmp_path / "replica.db"
    shutil.copy(pipeline.base_dir / "shop.db", replica)
    sync_insert(pipeline, index, 601)
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open_source_url(f"sqlite:///{replica}"))
        primary = stack.enter_context(open_source_url(pipeline.source_url()))
        target = stack.enter_context(tantivy(pipeline))
        plans = {a: p for a, (p, _) in resolve_plans(pipeline, source, ["products"]).items()}
        store = stack.enter_context(open_store(pipeline))
        runner = local_runner(LocalResources(source, target, plans, store, primary=primary))
        [report] = Verifier(source, target, plans, runner, pipeline.job).run()
    assert drift(report) == no_drift()
    assert report.path == CHECKSUMS, report.path_reason
