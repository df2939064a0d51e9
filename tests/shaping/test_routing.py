"""Routed documents (issue 32, ``indexes[].routing``): every write of a root document, and every
delete, carries its routing value, or an engine with several shards deletes nothing (a delete
without routing goes to the shard of the id's hash). The row of a deleted document is gone, so
its routing is read back from the index.

The engine is osmem-server, a TEST DOUBLE of OpenSearch with one node that finds a document
whatever its routing: what these tests check is what reaches it, through the proxy that records
each bulk item's (op, id, routing). The shop in SQLite, polled (see ``test_soft_deletes.py``),
routed by ``category_id``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config import load_pipeline
from sparkindex.documents.tombstones import TOMBSTONE_HASH_PREFIX
from sparkindex.jobs.redrive import redrive
from sparkindex.resources import open_store
from sparkindex.verify.repair import RepairResult
from tests.shaping.test_soft_deletes import (
    PRODUCTS,
    checked,
    delete_product,
    polled_shop,
    reindex,
    sql,
    stored,
    sync,
    verify,
)
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import opensearch_url

pytestmark = pytest.mark.slow

ROUTED = "    routing: category_id\n"
Action = tuple[str, str, str | None]


def actions(proxy: HttpProxy, since: int = 0) -> list[Action]:
    """(op, id, routing) of every bulk item forwarded to the products' versions since the
    *since*-th bulk."""
    return [a for bulk in proxy.bulks[since:] if bulk.path.startswith("/products_v") for a in bulk.actions]


def categories(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return {str(i): str(c) for i, c in conn.execute("SELECT id, category_id FROM products")}
    finally:
        conn.close()


def other_category(db: Path, product: int) -> int:
    conn = sqlite3.connect(db)
    try:
        [(found,)] = conn.execute(
            "SELECT MIN(id) FROM categories WHERE id <> (SELECT category_id FROM products WHERE id = ?)", (product,)
        ).fetchall()
        return int(found)
    finally:
        conn.close()


def test_writes_and_deletes_carry_the_routing(tmp_path: Path, spark: Any, fault_proxy: HttpProxy) -> None:
    pipeline, db = polled_shop(tmp_path / "shop", ROUTED, opensearch_url(fault_proxy))
    routing = categories(db)
    reindex(pipeline, spark)
    # every product written (the partitions, and the reindex's catch-up again), each under its routing
    built = set(actions(fault_proxy))
    assert built == {("index", i, r) for i, r in routing.items()} and len(built) == PRODUCTS
    assert sync(pipeline, spark).applied == 0

    # an update, a delete (its routing read back from the index), a row moved to another routing
    mark = len(fault_proxy.bulks)
    moved = other_category(db, 6)
    sql(
        db,
        ("UPDATE products SET name = 'renamed', updated_at = '2026-01-02 00:00:00' WHERE id = 3", ()),
        ("UPDATE products SET category_id = ?, updated_at = '2026-01-02 00:00:00' WHERE id = 6", (moved,)),
    )
    delete_product(db, 4, "2026-01-02 00:00:00")
    summary = sync(pipeline, spark)
    assert (summary.applied, summary.deleted) == (2, 1)
    seen = actions(fault_proxy, mark)
    assert ("index", "3", routing["3"]) in seen
    assert ("delete", "4", routing["4"]) in seen
    # the moved row's old copy is deleted under its old routing, before the write under the new
    assert seen.index(("delete", "6", routing["6"])) < seen.index(("index", "6", str(moved)))
    assert all(r is not None for _, _, r in seen), seen
    report = checked(pipeline)
    assert report.clean, report.to_dict()

    # repair deletes an extra document (its row deleted unseen) under its routing
    delete_product(db, 8, "", logged=False)
    mark = len(fault_proxy.bulks)
    result = verify(pipeline, fix=True)
    assert isinstance(result, RepairResult) and result.before[0].extra == 1 and result.after[0].clean
    assert actions(fault_proxy, mark) == [("delete", "8", routing["8"])]


def test_soft_deletes_keep_the_routing(tmp_path: Path, spark: Any, fault_proxy: HttpProxy) -> None:
    """A tombstone is written whole (op index, the engines' update takes no external version)
    under the routing of the copy it replaces; so is one that repair writes."""
    pipeline, db = polled_shop(tmp_path / "shop", ROUTED + "    deletes: soft\n", opensearch_url(fault_proxy))
    routing = categories(db)
    reindex(pipeline, spark)
    sync(pipeline, spark)
    mark = len(fault_proxy.bulks)
    delete_product(db, 4, "2026-01-02 00:00:00")
    assert sync(pipeline, spark).deleted == 1
    assert actions(fault_proxy, mark) == [("index", "4", routing["4"])]
    doc = stored(pipeline, "4")["4"]
    assert doc.hash is not None and doc.hash.startswith(TOMBSTONE_HASH_PREFIX) and doc.source["_deleted"] is True
    assert doc.routing == routing["4"]

    delete_product(db, 8, "", logged=False)
    mark = len(fault_proxy.bulks)
    result = verify(pipeline, fix=True)
    assert isinstance(result, RepairResult) and result.before[0].extra == 1
    assert result.after[0].clean and result.after[0].tombstones == 2, result.after[0].to_dict()
    assert actions(fault_proxy, mark) == [("index", "8", routing["8"])]


def test_copies_under_an_old_routing_are_deleted_by_the_redrive_and_by_repair(
    tmp_path: Path, spark: Any, fault_proxy: HttpProxy
) -> None:
    """A document whose routing changed while it was dead-lettered is re-driven under its new
    routing, its old copy deleted first; and after the routing column is removed from the
    pipeline, repair rewrites every document unrouted and deletes each routed copy (the plan no
    longer names a routing: the copies' routings are read back from the index)."""
    pipeline, db = polled_shop(tmp_path / "shop", ROUTED, opensearch_url(fault_proxy))
    indexed = categories(db)
    reindex(pipeline, spark)
    # product 6 dead-lettered; meanwhile its row moved to another category (no sync saw it)
    moved = other_category(db, 6)
    sql(db, ("UPDATE products SET category_id = ? WHERE id = 6", (moved,)))
    with open_store(pipeline) as store:
        store.dead_letters.add("sync:default", "products", None, [("6", "WriteRejected", "refused")])
    mark = len(fault_proxy.bulks)
    report = redrive(pipeline)
    assert (report.succeeded, report.failed) == (1, 0), report.to_dict()
    assert actions(fault_proxy, mark) == [("delete", "6", indexed["6"]), ("index", "6", str(moved))]
    assert checked(pipeline).clean
    routing = categories(db)

    # the routing column removed: every document is stale (the routing keys the content hash)
    path = tmp_path / "shop" / "pipeline.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace(ROUTED, ""), encoding="utf-8")
    unrouted = load_pipeline(path)
    assert checked(unrouted).stale == PRODUCTS
    mark = len(fault_proxy.bulks)
    result = verify(unrouted, fix=True)
    assert isinstance(result, RepairResult) and result.after[0].clean, result.after[0].to_dict()
    seen = actions(fault_proxy, mark)
    assert sorted(a for a in seen if a[0] == "delete") == sorted(("delete", i, r) for i, r in routing.items())
    assert sorted(a for a in seen if a[0] == "index") == sorted(("index", i, None) for i in routing)
    assert all(seen.index(("delete", i, r)) < seen.index(("index", i, None)) for i, r in routing.items())
