"""Polling change capture on SQLite (any database): `changes: {column: updated_at}` with an
overlap window for late commits, fan-out through relations, deletes by a key diff or from a
tombstone table."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.fanout import FanOut
from sparkindex.capture.session import resolve_consumer_plan, watched_tables
from sparkindex.capture.source import open_change_source
from sparkindex.capture.sync.run import SyncRun
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.demo.shop import PIPELINE_YAML
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.verify.local import verify_alias
from tests.capture.helpers import HOSTILE
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)
from tests.support.osmem import OsmemCluster
from tests.support.polled_shop import T0, polled_shop_db

pytestmark = pytest.mark.slow


def _shop(directory: Path, changes: str, target: str | None = None) -> tuple[Pipeline, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    polled_shop_db(db, 150)
    text = PIPELINE_YAML.format(partition_size=50).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n    changes: {changes}\n")
    if target is not None:  # reviews as join children, in a search engine
        text = text.replace("url: tantivy://index", f"url: {target}")
        text = text.replace("name: reviews\n        type: nested", "name: review\n        type: join")
    (directory / "pipeline.yaml").write_text(text + "sync:\n  trigger_s: 0.2\n", encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml"), db


def _run(pipeline: Pipeline, spark: Any) -> Any:
    return SyncRun(pipeline, None, until_caught_up=True, spark_factory=lambda: spark).run()


def _verify(pipeline: Pipeline) -> Any:
    source = open_source(pipeline.source_url())
    target = open_target(pipeline.target.url, pipeline.base_dir)
    [(plan, _)] = resolve_plans(pipeline, source, ["products"]).values()
    return verify_alias(source, target, plan)


def _doc(pipeline: Pipeline, doc_id: str) -> dict[str, Any] | None:
    target = open_target(pipeline.target.url, pipeline.base_dir)
    hits = [h for h in target.search("products", f'_id:"{doc_id}"', limit=3) if h.id == doc_id]
    return hits[0].source if hits else None


def _sql(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    conn = sqlite3.connect(db)
    for sql, params in statements:
        conn.execute(sql, params)
    conn.commit()
    conn.close()


def test_polling_with_key_diff(tmp_path: Path, spark: Any) -> None:
    pipeline, db = _shop(
        tmp_path / "shop", "{column: updated_at, overlap_s: 600, key_diff_every_s: 3600, key_diff_range_docs: 40}"
    )
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"
    assert _run(pipeline, spark).applied == 0
    category = sqlite3.connect(db).execute("SELECT category_id FROM products WHERE id = 9").fetchone()[0]
    _sql(
        db,
        ("UPDATE products SET name = ?, updated_at = '2026-01-02 00:00:10' WHERE id = 3", (HOSTILE[0],)),
        ("UPDATE categories SET name = ?, updated_at = '2026-01-02 00:00:10' WHERE id = ?", (HOSTILE[1], category)),
        (
            "INSERT INTO products (id, name, description, price, stock, category_id, created_at, updated_at) "
            "VALUES (5000, ?, 'x', 1.0, 1, 1, ?, '2026-01-02 00:00:10')",
            (HOSTILE[2], T0),
        ),
        ("DELETE FROM reviews WHERE product_id = 4", ()),
        ("DELETE FROM products WHERE id = 4", ()),
    )
    first = _run(pipeline, spark)
    assert first.deleted == 1 and first.applied >= 3
    # a transaction that wrote an older value but committed after that poll: the overlap finds it
    _sql(db, ("UPDATE products SET name = ?, updated_at = '2026-01-02 00:00:05' WHERE id = 6", (HOSTILE[3],)))
    late = _run(pipeline, spark)
    assert late.applied == 1
    assert _run(pipeline, spark).applied == 0  # rows in the window are not applied again
    report = _verify(pipeline)
    assert report.clean, report.to_dict()
    assert _doc(pipeline, "4") is None
    assert _doc(pipeline, "3")["name"] == HOSTILE[0]  # type: ignore[index]
    assert _doc(pipeline, "6")["name"] == HOSTILE[3]  # type: ignore[index]
    assert _doc(pipeline, "9")["category"]["name"] == HOSTILE[1]  # type: ignore[index]


def test_the_key_diff_deletes_the_join_children_of_a_gone_parent(
    tmp_path: Path, spark: Any, osmem_cluster: OsmemCluster
) -> None:
    """Polling sees no deletes: the key diff finds the product gone, and its reviews (join
    children, on osmem-server, a TEST DOUBLE) go with it; their rows went too, unseen."""
    pipeline, db = _shop(
        tmp_path / "shop",
        "{column: updated_at, overlap_s: 600, key_diff_every_s: 3600, key_diff_range_docs: 40}",
        osmem_cluster.opensearch_url,
    )
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"
    _run(pipeline, spark)
    conn = sqlite3.connect(db)
    [(product,)] = conn.execute("SELECT product_id FROM reviews ORDER BY id LIMIT 1 OFFSET 30").fetchall()
    reviews = [r for (r,) in conn.execute("SELECT id FROM reviews WHERE product_id = ?", (product,))]
    conn.close()
    target = open_target(pipeline.target.url, pipeline.base_dir)
    held = {d for d, _ in target.scan_hashes("products", ids=[f"review:{r}" for r in reviews])}
    assert held == {f"review:{r}" for r in reviews} and reviews
    _sql(
        db, ("DELETE FROM reviews WHERE product_id = ?", (product,)), ("DELETE FROM products WHERE id = ?", (product,))
    )
    summary = _run(pipeline, spark)
    assert summary.deleted == 1 + len(reviews)
    assert not list(target.scan_hashes("products", ids=[str(product), *(f"review:{r}" for r in reviews)]))
    report = _verify(pipeline)
    assert report.clean, report.to_dict()


def test_polling_deletes_from_a_tombstone_table(tmp_path: Path, spark: Any) -> None:
    pipeline, db = _shop(tmp_path / "shop", "{column: updated_at, tombstones: gone}")
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"
    _run(pipeline, spark)
    review = sqlite3.connect(db).execute("SELECT id FROM reviews WHERE product_id = 8 LIMIT 1").fetchone()[0]
    _sql(
        db,
        ("DELETE FROM reviews WHERE product_id = 5", ()),
        ("DELETE FROM products WHERE id = 5", ()),
        ("INSERT INTO gone VALUES ('products', '{\"id\": 5}', '2026-01-03 00:00:00')", ()),
        ("DELETE FROM reviews WHERE id = ?", (review,)),
        (f"INSERT INTO gone VALUES ('reviews', '{{\"id\": {review}, \"product_id\": 8}}', '2026-01-03 00:00:00')", ()),
    )
    summary = _run(pipeline, spark)
    assert summary.deleted == 1 and summary.applied == 1
    assert _doc(pipeline, "5") is None
    assert review not in [r["id"] for r in _doc(pipeline, "8")["reviews"]]  # type: ignore[index]
    assert _verify(pipeline).clean


def test_the_key_diff_tiles_the_index_into_ranges_once_per_interval(tmp_path: Path, spark: Any) -> None:
    """One recheck per sort-key range (about key_diff_range_docs documents each, a Spark task
    each): together they cover the whole index, and the next comes after key_diff_every_s."""
    pipeline, _ = _shop(tmp_path / "shop", "{column: updated_at, key_diff_every_s: 3600, key_diff_range_docs: 40}")
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"
    source = open_source(pipeline.source_url())
    fanout = FanOut(resolve_consumer_plan(pipeline, source, "products"), source)
    changes = open_change_source(pipeline, source, watched_tables([fanout]), "tiles")
    try:
        first = changes.read(changes.start(), 1000)
        again = changes.read(changes.start(), 1000)
    finally:
        changes.close()
        source.close()
    rechecks = [c for c in first.changes if c.op == "recheck"]
    assert len(rechecks) >= 3  # 150 documents, about 40 per range
    assert all(c.old is not None and c.old["alias"] == "products" for c in rechecks)
    bounds = [(c.old["lo"], c.old["hi"]) for c in rechecks if c.old is not None]
    assert bounds[0][0] is None and bounds[-1][1] is None
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds)), bounds
    assert not [c for c in again.changes if c.op == "recheck"]
