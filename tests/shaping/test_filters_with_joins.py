"""Row filters with join children under change capture (issue 32): the shop's reviews as
``type: join`` children (documents of their own, ``review:<id>``, routed to their product), a
``where:`` on the products and one on the join relation, polled from SQLite into osmem-server (a
TEST DOUBLE of OpenSearch). Products and reviews move out of their filters and back in under
``sync --until-caught-up``:

* a product leaving the index's filter takes its children with it (they are documents of their
  own: removing the parent's document does not remove them);
* a review leaving its relation's filter keeps its id and its parent, so nothing but the filter
  says that its document must go;
* both come back when their rows pass the filters again.

Afterwards verify finds nothing missing, extra, stale or duplicated, and the children are
concretely there or not.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.targets.registry import open_target
from tests.shaping.test_soft_deletes import checked, polled_shop, reindex, sql, sync
from tests.support.osmem import OsmemCluster

pytestmark = pytest.mark.slow

ROOT_WHERE = "stock > 100"
REVIEW_WHERE = "rating >= 3"


def joined_shop(directory: Path, target: str) -> tuple[Pipeline, Path]:
    """The polled shop with both filters, its reviews as join children named ``review``."""
    _, db = polled_shop(directory, f"    where: {json.dumps(ROOT_WHERE)}\n", target)
    path = directory / "pipeline.yaml"
    text = path.read_text(encoding="utf-8")
    nested = "      - name: reviews\n        type: nested\n        table: reviews\n"
    join = "      - name: review\n        type: join\n        table: reviews\n"
    joined = text.replace(nested, f"{join}        where: {json.dumps(REVIEW_WHERE)}\n")
    assert joined != text
    path.write_text(joined, encoding="utf-8")
    return load_pipeline(path), db


def query(db: Path, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def held(pipeline: Pipeline, ids: list[str]) -> set[str]:
    """Which of *ids* the alias holds."""
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    try:
        return {doc_id for doc_id, _ in target.scan_hashes("products", ids=ids)}
    finally:
        target.close()


def kids(db: Path, product: int, where: str = "1 = 1") -> list[str]:
    return [f"review:{r}" for (r,) in query(db, f"SELECT id FROM reviews WHERE product_id = ? AND {where}", product)]


def assert_clean(pipeline: Pipeline) -> None:
    report = checked(pipeline)
    assert (report.missing, report.extra, report.stale, report.duplicates) == (0, 0, 0, 0), report.to_dict()


def test_rows_and_children_leaving_and_entering_the_filters(
    tmp_path: Path, spark: Any, osmem_cluster: OsmemCluster
) -> None:
    pipeline, db = joined_shop(tmp_path / "shop", osmem_cluster.opensearch_url)
    children = f"id IN (SELECT product_id FROM reviews WHERE {REVIEW_WHERE})"
    others = f"id IN (SELECT product_id FROM reviews WHERE NOT ({REVIEW_WHERE}))"
    # inside, with a child inside (and one outside): a product that leaves, one whose reviews move
    [leaver, stayer] = [
        p for (p,) in query(db, f"SELECT id FROM products WHERE {ROOT_WHERE} AND {children} AND {others} LIMIT 2")
    ]
    [(comer,)] = query(db, f"SELECT id FROM products WHERE NOT ({ROOT_WHERE}) AND {children} LIMIT 1")
    [(good,)] = query(db, f"SELECT id FROM reviews WHERE product_id = ? AND {REVIEW_WHERE} LIMIT 1", stayer)
    [(bad,)] = query(db, f"SELECT id FROM reviews WHERE product_id = ? AND NOT ({REVIEW_WHERE}) LIMIT 1", stayer)
    reindex(pipeline, spark)
    assert sync(pipeline, spark).applied == 0
    leaver_kids, comer_kids = kids(db, leaver, REVIEW_WHERE), kids(db, comer, REVIEW_WHERE)
    before = [str(leaver), *leaver_kids, f"review:{good}"]
    assert held(pipeline, before) == set(before)
    assert not held(pipeline, [str(comer), *comer_kids, f"review:{bad}"])

    # out: a product (its children go too) and a review of a product that stays; in: a product
    # outside the filter (its children come) and a review below the relation's filter
    t1 = "2026-01-02 00:00:00"
    sql(
        db,
        ("UPDATE products SET stock = 0, updated_at = ? WHERE id = ?", (t1, leaver)),
        ("UPDATE products SET stock = 500, updated_at = ? WHERE id = ?", (t1, comer)),
        ("UPDATE reviews SET rating = 1, updated_at = ? WHERE id = ?", (t1, good)),
        ("UPDATE reviews SET rating = 5, updated_at = ? WHERE id = ?", (t1, bad)),
    )
    summary = sync(pipeline, spark)
    assert summary.deleted == 2 + len(leaver_kids), summary
    assert not held(pipeline, [str(leaver), *kids(db, leaver), f"review:{good}"])
    assert held(pipeline, [str(comer), *comer_kids, f"review:{bad}"]) == {str(comer), *comer_kids, f"review:{bad}"}
    assert_clean(pipeline)

    # and back: the product and the review pass their filters again
    t2 = "2026-01-03 00:00:00"
    sql(
        db,
        ("UPDATE products SET stock = 500, updated_at = ? WHERE id = ?", (t2, leaver)),
        ("UPDATE reviews SET rating = 4, updated_at = ? WHERE id = ?", (t2, good)),
    )
    sync(pipeline, spark)
    back = [str(leaver), *leaver_kids, f"review:{good}"]
    assert held(pipeline, back) == set(back)
    assert_clean(pipeline)
