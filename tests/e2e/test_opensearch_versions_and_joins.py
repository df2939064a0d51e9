"""OpenSearch (osmem-server, a TEST DOUBLE) through the real CLI: external versions keep a newer
document against an older write, and a join relation indexes routed child documents. Split from
``test_opensearch_shop.py`` so the two files run on different test workers."""

from __future__ import annotations

from pathlib import Path

from sparkindex.config import load_pipeline
from sparkindex.documents.builder import make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.resources import open_source_url, open_target
from sparkindex.retry import Backoff
from sparkindex.worker.bulk import bulk_with_retries
from tests.e2e.shop import execute, make_shop
from tests.e2e.test_opensearch_shop import doc, hit_ids, reindex, run, search, shop_on_osmem, sql, verify
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)
from tests.support.osmem import OsmemCluster


def test_an_older_version_never_overwrites_a_newer_one(tmp_path: Path, cli: Path, osmem_cluster: OsmemCluster) -> None:
    """`version: row_version`: documents carry the column as their external version
    (version_type=external_gte on osmem, a test double). A write built from an older row loses;
    a newer one wins; a row without a version is dead-lettered."""
    pipeline = shop_on_osmem(tmp_path, osmem_cluster, 200, 100, index_yaml="    version: row_version\n")
    db = tmp_path / "shop.db"
    execute(db, "ALTER TABLE products ADD COLUMN row_version INTEGER")
    execute(db, "UPDATE products SET row_version = id * 10")
    execute(db, "UPDATE products SET row_version = NULL WHERE id = 3")

    code, summary, err = reindex(cli, pipeline)
    assert code == 1, err
    assert (summary["failed"], summary["indexed"]) == (1, 199)
    _, dlq, _ = run(cli, "dlq", "list", "-c", str(pipeline))
    assert [(d["doc_id"], d["error_class"]) for d in dlq["dead_letters"]] == [("3", "NullVersion")]
    five = doc(osmem_cluster, "products", "5")
    assert five["_version"] == 50

    loaded = load_pipeline(pipeline)
    with open_source_url(loaded.source_url()) as source, open_target(loaded) as target:
        plan, _ = resolve_plans(loaded, source, ["products"], target)["products"]
        builder = make_builder(source, plan)

        def write_row_5() -> None:
            docs, failures, missing = builder.by_keys([(5,)])
            assert failures == [] and missing == [] and len(docs) == 1
            outcome = bulk_with_retries(target, "products_v1", [docs[0].bulk_item()], 2, Backoff(0.01, 0.1))
            assert (outcome.success, outcome.failures) == (1, []), "an obsolete write counts as done, not failed"

        execute(db, "UPDATE products SET name = 'older snapshot', row_version = 49 WHERE id = 5")
        write_row_5()
        five = doc(osmem_cluster, "products", "5")
        assert five["_version"] == 50 and five["_source"]["name"] != "older snapshot"

        execute(db, "UPDATE products SET name = 'newer row', row_version = 51 WHERE id = 5")
        write_row_5()
        five = doc(osmem_cluster, "products", "5")
        assert (five["_version"], five["_source"]["name"]) == (51, "newer row")
    code, report = verify(cli, pipeline)
    assert (report["missing"], report["stale"], report["extra"]) == (1, 0, 0)  # only the unversioned row


JOIN_YAML = """\
source:
  url: sqlite:///shop.db
target:
  url: {url}
spark:
  master: local[2,4]
indexes:
  - alias: products
    table: products
    partition_size: 100
    page_size: 40
    settings: {{number_of_shards: 3}}
    relations:
      - name: category
        type: object
        table: categories
      - name: review
        type: join
        table: reviews
        relations:
          - name: author
            type: object
            table: users
job:
  batch_size: 100
"""


def test_a_join_relation_indexes_routed_children(tmp_path: Path, cli: Path, osmem_cluster: OsmemCluster) -> None:
    """Reviews as child documents of their products in one index on osmem (a test double), each
    routed to its product; counted, verified and queried with has_child / parent_id."""
    make_shop(tmp_path, products=300, partition_size=100)
    pipeline = tmp_path / "join.yaml"
    pipeline.write_text(JOIN_YAML.format(url=osmem_cluster.opensearch_url), encoding="utf-8")
    db = tmp_path / "shop.db"
    [(products,)] = sql(db, "SELECT count(*) FROM products")
    [(reviews,)] = sql(db, "SELECT count(*) FROM reviews")

    code, summary, err = reindex(cli, pipeline)
    assert code == 0, err
    assert summary["status"] == "COMPLETED" and summary["failed"] == 0
    assert summary["indexed"] == products + reviews  # children are documents the index holds
    count = osmem_cluster.request("GET", "/products/_count")
    assert isinstance(count, dict) and count["count"] == products + reviews

    review_id, product_id, author_id, rating = sql(
        db, "SELECT id, product_id, author_id, rating FROM reviews ORDER BY id LIMIT 1"
    )[0]
    child = doc(osmem_cluster, "products", f"review:{review_id}", routing=str(product_id))
    assert child["found"] and child["_routing"] == str(product_id)
    assert child["_source"]["join"] == {"name": "review", "parent": str(product_id)}
    assert child["_source"]["review"]["rating"] == rating
    assert child["_source"]["review"]["author"]["id"] == author_id
    parent = doc(osmem_cluster, "products", str(product_id))
    assert parent["_source"]["join"] == "products" and "review" not in parent["_source"]

    children = search(
        osmem_cluster,
        "products",
        {"query": {"parent_id": {"type": "review", "id": str(product_id)}}, "size": 100},
    )
    expected = {f"review:{r}" for (r,) in sql(db, f"SELECT id FROM reviews WHERE product_id = {product_id}")}
    assert hit_ids(children) == expected
    five_star = search(
        osmem_cluster,
        "products",
        {"query": {"has_child": {"type": "review", "query": {"term": {"review.rating": 5}}}}, "size": 1000},
    )
    assert hit_ids(five_star) == {
        str(p) for (p,) in sql(db, "SELECT DISTINCT product_id FROM reviews WHERE rating = 5")
    }

    code, report = verify(cli, pipeline)
    assert code == 0, report
    assert (report["missing"], report["extra"], report["stale"], report["duplicates"]) == (0, 0, 0, 0)
    assert report["checked"] == report["index_docs"] == products + reviews
