"""What explain shows of a shaped index: the shape itself, a document built through it, and a row
a filter keeps out of the index, said so.

Why: a filter, a rename or a computed field changes what the index holds without any document
saying why. A user who asks for row 2 and sees "no such document" would look for a bug in the
data; explain must say the row is there and which filter leaves it out. And the sample document
alone shows the result of a shape, not what made it: the filters, the renames, the left-out
columns, each computed field's type, the routing column, the delete mode and the transform's
identity are listed beside it. SQLite, no Spark.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from sparkindex import api
from sparkindex.config import load_pipeline
from sparkindex.jobs.explain import explain
from tests.fresh_databases import DIALECTS, fresh_database

ROOT = Path(__file__).resolve().parents[2]

SHAPED = """\
source:
  url: sqlite:///shop.db
target:
  url: opensearch://127.0.0.1:9
indexes:
  - alias: products
    table: products
    where: deleted_at IS NULL
    exclude: [secret, deleted_at]
    computed:
      full_name: "first || ' ' || last"
      cents: CAST(price * 100 AS INTEGER)
    routing: shop_id
    deletes: soft
    transform: {function: "tests.explain.shout:shout", version: "2", on_change: [title]}
    fields:
      title: {from: name}
      reviews.stars: {from: rating}
    relations:
      - name: reviews
        type: nested
        table: reviews
        where: approved = 1
        exclude: [email]
        computed: {short: "substr(body, 1, 3)"}
"""


def _shop(folder: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{folder / 'shop.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, first TEXT, last TEXT, "
            "price REAL, shop_id INTEGER NOT NULL, deleted_at TEXT, secret TEXT)"
        )
        conn.exec_driver_sql(
            "CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id), "
            "rating INTEGER, body TEXT, approved INTEGER NOT NULL, email TEXT)"
        )
        conn.exec_driver_sql(
            "INSERT INTO products VALUES (1, 'saw', 'Ada', 'Lovelace', 9.5, 7, NULL, 's1'), "
            "(2, 'axe', 'Bob', 'Builder', 20, 8, '2024-01-01', 's2'), (3, 'vise', 'Cy', 'Young', 1.25, 7, NULL, 's3')"
        )
        conn.exec_driver_sql(
            "INSERT INTO reviews VALUES (10, 1, 5, 'great saw', 1, 'a@x'), (11, 1, 1, 'spam', 0, 'b@x'), "
            "(12, 2, 4, 'sharp', 1, 'c@x')"
        )
    engine.dispose()


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("shaped")
    _shop(folder)
    config = folder / "pipeline.yaml"
    config.write_text(SHAPED, encoding="utf-8")
    return config


def test_the_shape_is_listed_beside_a_document_built_through_it(shaped: Path) -> None:
    e = explain(load_pipeline(shaped))
    assert e.doc_id == "1" and e.filtered is None
    assert e.document == {
        "id": 1,
        "title": "saw",
        "first": "Ada",
        "last": "Lovelace",
        "price": 9.5,
        "shop_id": 7,
        "full_name": "Ada Lovelace",
        "cents": 950,
        "reviews": [{"id": 10, "product_id": 1, "stars": 5, "body": "great saw", "approved": 1, "short": "gre"}],
        "loud": "SAW",
    }
    shape = e.shape
    assert shape.filter == "deleted_at IS NULL" and shape.relation_filters == {"reviews": "approved = 1"}
    assert shape.renamed == {"title": "name", "reviews.stars": "rating"}
    assert shape.excluded == ["secret", "deleted_at", "reviews.email"]
    computed = {c.path: (c.expression, c.mapping_type) for c in shape.computed}
    assert computed == {
        "full_name": ("first || ' ' || last", "text"),
        "cents": ("CAST(price * 100 AS INTEGER)", "long"),
        "reviews.short": ("substr(body, 1, 3)", "text"),
    }
    assert [c.database_type for c in shape.computed if c.path == "cents"] == ["BIGINT"]
    assert (shape.routing, shape.deletes) == ("shop_id", "soft")
    assert shape.transform == {"function": "tests.explain.shout:shout", "version": "2", "on_change": ["title"]}
    assert not shape.plain
    body = e.to_dict()
    assert body["shape"]["computed"][1] == {
        "path": "cents",
        "expression": "CAST(price * 100 AS INTEGER)",
        "database_type": "BIGINT",
        "mapping_type": "long",
    }
    assert body["filtered"] is None


def test_a_row_the_filter_leaves_out_is_said_so(shaped: Path) -> None:
    e = explain(load_pipeline(shaped), doc_id="2")
    assert e.document is None and e.failure is None and e.doc_id == "2"
    assert e.filtered is not None and e.filtered.startswith("row 2: filtered out by `deleted_at IS NULL`")
    assert "tombstone" in e.filtered  # deletes: soft
    result = api.explain(shaped, doc_id="2")
    assert result.outcome is api.Outcome.DONE and result.to_dict() == e.to_dict()
    # a row that does not exist at all is still no such document
    with pytest.raises(api.UsageError, match="no such document"):
        explain(load_pipeline(shaped), doc_id="99")


def test_the_cli_shows_the_shape_and_the_filter(cli: Path, shaped: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the transform's module, as a worker imports it
    run = subprocess.run(
        [str(cli), "explain", "-c", str(shaped), "--id", "2"], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 0, run.stderr
    text = run.stdout
    assert "── no document: row 2: filtered out by `deleted_at IS NULL`" in text
    for line in (
        "rows: only where `deleted_at IS NULL`",
        "rows of reviews: only where `approved = 1`",
        "renamed: title ← name, reviews.stars ← rating",
        "excluded: secret, deleted_at, reviews.email",
        "computed: cents = CAST(price * 100 AS INTEGER)  (the database's BIGINT: long in the mapping)",
        "routing: each document's _routing is the value of its shop_id",
        "deletes: soft",
        "transform: tests.explain.shout:shout, version 2 (part of every content hash); on_change: title (it runs",
    ):
        assert line in text, f"{line!r} not in:\n{text}"
    as_json = subprocess.run(
        [str(cli), "explain", "-c", str(shaped), "--id", "2", "--json"], capture_output=True, text=True, env=env
    )
    assert as_json.returncode == 0, as_json.stderr
    body: dict[str, Any] = orjson.loads(as_json.stdout.strip().splitlines()[-1])
    assert body["filtered"].startswith("row 2: filtered out by") and body["document"] is None
    assert body["shape"]["routing"] == "shop_id"


def test_a_join_child_of_a_filtered_parent_names_the_parent(tmp_path: Path) -> None:
    _shop(tmp_path)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "source:\n  url: sqlite:///shop.db\ntarget:\n  url: opensearch://127.0.0.1:9\nindexes:\n"
        "  - alias: products\n    table: products\n    where: deleted_at IS NULL\n"
        "    relations:\n      - {name: reviews, type: join, table: reviews, where: approved = 1}\n",
        encoding="utf-8",
    )
    pipeline = load_pipeline(config)
    orphan = explain(pipeline, doc_id="reviews:12")
    assert orphan.filtered == "row reviews:12: its parent row 2 is filtered out by `deleted_at IS NULL`"
    hidden = explain(pipeline, doc_id="reviews:11")
    assert hidden.filtered == "row reviews:11: filtered out by `approved = 1` (the where of relation 'reviews')"
    shown = explain(pipeline, doc_id="reviews:10")
    assert shown.filtered is None and shown.document is not None


def test_an_unshaped_index_says_so_in_one_line(tmp_path: Path, cli: Path) -> None:
    _shop(tmp_path)
    config = tmp_path / "pipeline.yaml"
    config.write_text("source:\n  url: sqlite:///shop.db\nindexes:\n  - {alias: products, table: products}\n")
    assert explain(load_pipeline(config)).shape.plain
    run = subprocess.run([str(cli), "explain", "-c", str(config)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "── shape: every row, every column as it is" in run.stdout


@pytest.mark.parametrize("kind", DIALECTS)
def test_every_builder_reports_the_filtered_row(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """PostgreSQL builds in the database (``build: auto``): its lookup by key goes through the
    filter too, and the row is still found without it."""

    def load(engine: sa.Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(20), gone INTEGER)")
            conn.exec_driver_sql("INSERT INTO items VALUES (1, 'a', 0), (2, 'b', 1), (3, 'c', 0)")

    concat = "CONCAT(name, '!')" if kind == "mysql" else "name || '!'"  # || is OR on MariaDB
    with fresh_database(kind, tmp_path, lambda: request.getfixturevalue("services"), load) as url:
        config = tmp_path / "pipeline.yaml"
        config.write_text(
            f"source:\n  url: {url}\nindexes:\n  - alias: items\n    table: items\n    where: gone = 0\n"
            f'    computed: {{label: "{concat}"}}\n',
            encoding="utf-8",
        )
        pipeline = load_pipeline(config)
        assert explain(pipeline, doc_id="2").filtered == "row 2: filtered out by `gone = 0`"
        shown = explain(pipeline, doc_id="3")
        assert shown.document == {"id": 3, "name": "c", "gone": 0, "label": "c!"}
        with pytest.raises(api.UsageError, match="no such document"):
            explain(pipeline, doc_id="4")
