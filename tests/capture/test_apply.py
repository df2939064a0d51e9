"""The apply step without a stream: fan-out through the shop's relation tree (SQLite, real
Tantivy), versioned writes, and the order guarantee (an older write applied last loses)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sparkindex.capture.apply import Applier, Consumer
from sparkindex.capture.fanout import FanOut
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from sparkindex.documents.builder import make_builder
from sparkindex.documents.mapping import infer_mapping
from sparkindex.documents.plan import resolve_index
from sparkindex.keys import document_id
from sparkindex.sources.change_model import Change
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.targets.target import Target
from tests.capture.helpers import HOSTILE
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Pipeline, Path]:
    return _shop(tmp_path, "tantivy://index")


def _shop(tmp_path: Path, target_url: str) -> tuple[Pipeline, Path]:
    generate_shop(tmp_path / "shop.db", 60)
    text = PIPELINE_YAML.format(partition_size=100).replace("tantivy://index", target_url)
    (tmp_path / "pipeline.yaml").write_text(text, encoding="utf-8")
    return load_pipeline(tmp_path / "pipeline.yaml"), tmp_path / "shop.db"


@pytest.fixture(params=["tantivy", "opensearch"])
def any_target_shop(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Pipeline, Path]:
    """The shop into Tantivy (sparkindex's own version ledger orders the writes) and into
    OpenSearch on osmem-server, a TEST DOUBLE (the engine orders them by ``external_gte``)."""
    if request.param == "tantivy":
        return _shop(tmp_path, "tantivy://index")
    cluster = request.getfixturevalue("osmem_cluster")
    return _shop(tmp_path, cluster.opensearch_url)


def _setup(pipeline: Pipeline) -> tuple[Consumer, Applier, Target, str]:
    source = open_source(pipeline.source_url())
    plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
    target = open_target(pipeline.target.url, pipeline.base_dir)
    index = target.create_version("products", infer_mapping(plan, "indexes[0]"))
    store = CoordinationStore(pipeline.coordination_url())
    applier = Applier(target, store, "sync:test")
    return Consumer("products", FanOut(plan, source), make_builder(source, plan)), applier, target, index


def _query(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_fan_out_walks_two_levels_and_both_images(shop: tuple[Pipeline, Path]) -> None:
    pipeline, db = shop
    consumer, _, _, _ = _setup(pipeline)
    author = _query(db, "SELECT author_id FROM reviews ORDER BY id LIMIT 1")[0][0]
    expected = {(p,) for (p,) in _query(db, f"SELECT DISTINCT product_id FROM reviews WHERE author_id = {author}")}
    roots = consumer.fanout.root_keys([Change("users", "update", 10, {"id": author}, {"id": author, "name": "x"})])
    assert set(roots.keys) == expected and set(roots.keys.values()) == {10}
    category = _query(db, "SELECT category_id FROM products WHERE id = 5")[0][0]
    expected = {(p,) for (p,) in _query(db, f"SELECT id FROM products WHERE category_id = {category}")}
    roots = consumer.fanout.root_keys([Change("categories", "update", 11, None, {"id": category, "name": "y"})])
    assert set(roots.keys) == expected
    # a review moved from product 1 to product 2: both documents change
    roots = consumer.fanout.root_keys(
        [Change("reviews", "update", 12, {"id": 1, "product_id": 1}, {"id": 1, "product_id": 2})]
    )
    assert set(roots.keys) == {(1,), (2,)}
    # the newest position that touched a document wins
    roots = consumer.fanout.root_keys(
        [Change("products", "update", 13, None, {"id": 3}), Change("products", "update", 14, None, {"id": 3})]
    )
    assert roots.keys == {(3,): 14}


def test_older_write_applied_last_loses(any_target_shop: tuple[Pipeline, Path]) -> None:
    """Two updates to one document land in separate batches; the older batch is written last:
    it is counted as skipped (not applied), and the index keeps the newer document."""
    pipeline, db = any_target_shop
    consumer, applier, target, index = _setup(pipeline)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE products SET name = ? WHERE id = 7", (HOSTILE[0],))
    conn.commit()
    older, _ = applier.build(consumer, {(7,): 100})  # read at the first update, written late
    conn.execute("UPDATE products SET name = ? WHERE id = 7", (HOSTILE[2],))
    conn.commit()
    conn.close()
    newer = applier.rebuild(consumer, index, {(7,): 200})
    assert newer.applied == 1
    late = applier.write("products", index, older)
    assert (late.applied, late.skipped) == (0, 1)
    [current], _ = applier.build(consumer, {(7,): 200})
    assert current.hash != older[0].hash
    assert list(target.scan_hashes(index, ids=["7"])) == [("7", current.hash)]
    # a delete is versioned too: a stale upsert after it does not bring the document back
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM reviews WHERE product_id = 7")
    conn.execute("DELETE FROM products WHERE id = 7")
    conn.commit()
    conn.close()
    deleted = applier.rebuild(consumer, index, {(7,): 300})
    assert deleted.deleted == 1
    stale = applier.write("products", index, older)
    assert (stale.applied, stale.skipped) == (0, 1)
    assert list(target.scan_hashes(index, ids=["7"])) == []
    assert document_id((7,)) == "7"
