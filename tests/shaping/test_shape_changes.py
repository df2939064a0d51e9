"""Field shaping changed in the YAML (issue 32): a rename (``fields: {title: {from: name}}``, and
``reviews.stars: {from: rating}`` inside a relation), an exclusion (``exclude``) and computed
fields (``computed``, SQL over the row), each applied to an index built with the shape before.
Every document's content changes, so verify reports every one stale (and none missing or extra);
repair rebuilds them and verify is clean again; the documents read back carry the new fields.
A computed field is typed in the mapping from the database's result type.

The shop is SQLite into an embedded Tantivy index, through ``sparkindex.api``; the type test also
runs on PostgreSQL and MariaDB (no Spark: ``api.explain`` resolves the plan and builds one document).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex import api
from sparkindex.config.urls import normalize_url
from sparkindex.targets.registry import open_target
from tests.capture.helpers import HOSTILE
from tests.e2e.shop import copy_shop, drop_database, fresh_database, make_shop

PRODUCTS = 40
#: hostile names, on the first products
NAMES = {1: HOSTILE[0], 2: HOSTILE[3], 3: "Mixed CASE \\ 'x'"}

DEMO_FIELDS = """\
    fields:
      name: {analyzer: english, keyword: true, copy_to: [all_text]}
      description: {analyzer: english, copy_to: [all_text]}
"""
RENAMED_FIELDS = """\
    fields:
      title: {from: name, analyzer: english, keyword: true, copy_to: [all_text]}
      description: {analyzer: english, copy_to: [all_text]}
      reviews.stars: {from: rating}
"""
#: a quote and a non-ASCII dash inside the expression's string literal
LABEL_SQL = "name || ' — it''s #' || id"


def shaped(text: str, *, rename: bool = False, exclude: bool = False, compute: bool = False) -> str:
    """The demo pipeline with the chosen shaping on the products and their reviews."""
    assert DEMO_FIELDS in text, text
    root = "    complexity: 3.0\n"
    reviews = "        table: reviews\n"
    if rename:
        text = text.replace(DEMO_FIELDS, RENAMED_FIELDS)
    if exclude:
        text = text.replace(root, root + "    exclude: [created_at]\n", 1)
        text = text.replace(reviews, reviews + "        exclude: [body]\n", 1)
    if compute:
        text = text.replace(root, root + f'    computed: {{label: "{LABEL_SQL}", stock_x2: "stock * 2"}}\n', 1)
        text = text.replace(reviews, reviews + '        computed: {stars_x10: "rating * 10"}\n', 1)
    return text


def documents(config: Path) -> dict[str, dict[str, Any]]:
    """Every stored document of the alias, by id."""
    pipeline = api.load(config)
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    out: dict[str, dict[str, Any]] = {}
    try:
        after = None
        while True:
            page = target.read_documents("products", after=after, size=500)
            out.update((d.id, d.source) for d in page)
            if len(page) < 500:
                return out
            after = page[-1].sort_key
    finally:
        target.close()


def source_rows(db: Path) -> tuple[dict[int, tuple[str, int]], dict[int, list[tuple[int, int]]]]:
    """(product id -> (name, stock)), (product id -> [(review id, rating)])."""
    conn = sqlite3.connect(db)
    products = {i: (n, s) for i, n, s in conn.execute("SELECT id, name, stock FROM products")}
    reviews: dict[int, list[tuple[int, int]]] = {i: [] for i in products}
    for rid, pid, rating in conn.execute("SELECT id, product_id, rating FROM reviews ORDER BY id"):
        reviews[pid].append((rid, rating))
    conn.close()
    return products, reviews


def assert_clean(config: Path, spark: Any) -> None:
    checked = api.verify(config, spark=spark)
    assert (checked.missing, checked.extra, checked.stale, checked.duplicates) == (0, 0, 0, 0), checked.report
    assert checked.index_docs == PRODUCTS


def change_shape_and_repair(config: Path, spark: Any, text: str) -> dict[str, dict[str, Any]]:
    """Write the new shape; verify: every document stale, none missing, extra or duplicated;
    repair; verify clean. The documents as stored afterwards."""
    config.write_text(text, encoding="utf-8")
    found = api.verify(config, spark=spark)
    assert (found.missing, found.extra, found.duplicates) == (0, 0, 0), found.report
    assert found.stale == PRODUCTS, f"stale {found.stale} of {PRODUCTS}: {found.report}"
    assert not found.clean
    repaired = api.repair(config, spark=spark)
    assert repaired.outcome is api.Outcome.DONE and repaired.clean, repaired.report
    assert_clean(config, spark)
    docs = documents(config)
    assert sorted(docs, key=int) == [str(i) for i in range(1, PRODUCTS + 1)]
    return docs


@pytest.mark.slow
def test_a_rename_an_exclusion_and_computed_fields_make_every_document_stale_until_repaired(
    tmp_path: Path, spark: Any
) -> None:
    make_shop(tmp_path, PRODUCTS, partition_size=20)
    db, config = tmp_path / "shop.db", tmp_path / "pipeline.yaml"
    conn = sqlite3.connect(db)
    conn.executemany("UPDATE products SET name = ? WHERE id = ?", [(n, i) for i, n in NAMES.items()])
    conn.commit()
    conn.close()
    products, reviews = source_rows(db)
    assert any(reviews.values())
    demo = config.read_text(encoding="utf-8")

    built = api.reindex(config, spark=spark)
    assert (built.outcome, built.indexed) == (api.Outcome.DONE, PRODUCTS)
    assert_clean(config, spark)
    before = documents(config)
    assert before["1"]["name"] == NAMES[1] and "title" not in before["1"]

    # a rename, at the root and inside a relation
    docs = change_shape_and_repair(config, spark, shaped(demo, rename=True))
    for pid, (name, _) in products.items():
        doc = docs[str(pid)]
        assert doc["title"] == name and "name" not in doc, doc
        assert "created_at" in doc and "label" not in doc
        got = [(r["id"], r["stars"]) for r in doc.get("reviews") or []]
        assert got == reviews[pid], doc
        assert all("rating" not in r and "body" in r for r in doc.get("reviews") or [])

    # an exclusion, at the root and inside a relation (renames kept)
    docs = change_shape_and_repair(config, spark, shaped(demo, rename=True, exclude=True))
    for pid, (name, _) in products.items():
        doc = docs[str(pid)]
        assert "created_at" not in doc and doc["title"] == name and "price" in doc, doc
        assert all("body" not in r and "stars" in r for r in doc.get("reviews") or []), doc

    # computed fields, at the root and inside a relation (the rest kept)
    docs = change_shape_and_repair(config, spark, shaped(demo, rename=True, exclude=True, compute=True))
    for pid, (name, stock) in products.items():
        doc = docs[str(pid)]
        assert doc["label"] == f"{name} — it's #{pid}", doc
        assert doc["stock_x2"] == 2 * stock and doc["title"] == name and "created_at" not in doc
        computed = [(r["id"], r["stars"], r["stars_x10"]) for r in doc.get("reviews") or []]
        assert computed == [(rid, rating, 10 * rating) for rid, rating in reviews[pid]], doc
    assert docs["1"]["label"] == f"{NAMES[1]} — it's #1"

    # and back to the demo's shape: every document stale again
    docs = change_shape_and_repair(config, spark, demo)
    assert docs == before


# -- computed fields' mapping types ------------------------------------------------------------------
CONCAT = {
    "sqlite": "name || ' #' || id",
    "postgres": "name || ' #' || id",
    "mysql": "CONCAT(name, ' #', id)",
}


@pytest.fixture(
    params=[
        pytest.param("sqlite"),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def typed_shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The demo shop (SQLite, or copied to a fresh database on the test server) with computed
    fields of several result types; the pipeline's path."""
    kind = request.param
    make_shop(tmp_path, 12, partition_size=20)
    config = tmp_path / "pipeline.yaml"
    text = config.read_text(encoding="utf-8")
    computed = f'{{twice: "stock * 2", half: "price / 2", label: "{CONCAT[kind]}"'
    computed += ', in_stock: "stock > 0"}' if kind == "postgres" else "}"
    text = text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n    computed: {computed}\n", 1)
    text = text.replace(
        "        table: reviews\n", '        table: reviews\n        computed: {stars_x10: "rating * 10"}\n', 1
    )
    name = None
    if kind != "sqlite":
        server = request.getfixturevalue("services")[kind]
        name = f"shp_{uuid.uuid4().hex[:10]}"
        url = fresh_database(server, name)
        copy_shop(tmp_path / "shop.db", normalize_url(url))
        text = text.replace("url: sqlite:///shop.db", f"url: {url}")
    config.write_text(text, encoding="utf-8")
    try:
        yield kind, config
    finally:
        if name is not None:
            drop_database(request.getfixturevalue("services")[kind], name)


def test_a_computed_field_is_typed_from_the_database_result_type(typed_shop: tuple[str, Path]) -> None:
    kind, config = typed_shop
    explained = api.explain(config, doc_id="3")
    assert explained.outcome is api.Outcome.DONE, explained.failure
    props = explained.mapping["properties"]
    types = {f: props[f]["type"] for f in ("twice", "half", "label")}
    assert types == {"twice": "long", "half": "double", "label": "text"}, props
    assert props["reviews"]["properties"]["stars_x10"]["type"] == "long", props["reviews"]
    if kind == "postgres":
        assert props["in_stock"]["type"] == "boolean", props
    doc = explained.document
    assert doc["twice"] == 2 * doc["stock"] and doc["half"] == pytest.approx(doc["price"] / 2)
    assert doc["label"] == f"{doc['name']} #3"
    assert all(r["stars_x10"] == 10 * r["rating"] for r in doc["reviews"]) and doc["reviews"]
    if kind == "postgres":
        assert doc["in_stock"] is (doc["stock"] > 0)
