"""Documents from rows: resolving an index against a live schema, building, ids, hashes, mappings.

The schema is a real SQLite file made in ``tmp_path``; nothing is mocked.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from sparkindex.config.indexes import FieldOverride, IndexConfig, RelationConfig
from sparkindex.demo.shop import shop_index_config
from sparkindex.documents import (
    BuiltDocument,
    DocumentBuilder,
    IndexPlan,
    content_hash,
    dumps_document,
    infer_mapping,
    resolve_index,
)
from sparkindex.errors import ConfigError
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange, Source

UNICODE = "Grüße 東京 🚀"
BIG = ("lorem ipsum dolor sit amet ünïcödé ✓ " * 3000)[: 100 * 1024]

SCHEMA = """
CREATE TABLE categories (id INTEGER PRIMARY KEY, name VARCHAR(50));
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE products (
    id INTEGER PRIMARY KEY,
    name TEXT,
    sku VARCHAR(32),
    price REAL,
    in_stock BOOLEAN,
    created DATETIME,
    category_id INTEGER REFERENCES categories(id)
);
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY,
    product_id INTEGER REFERENCES products(id),
    author_id INTEGER REFERENCES users(id),
    body TEXT
);
-- an index whose order differs from review id order, so a missing ORDER BY would show
CREATE INDEX reviews_by_product_author ON reviews (product_id, author_id);
CREATE TABLE order_lines (
    order_no INTEGER NOT NULL,
    line TEXT NOT NULL,
    qty INTEGER,
    PRIMARY KEY (order_no, line)
);
CREATE TABLE shipments (
    id INTEGER PRIMARY KEY,
    order_no INTEGER,
    line TEXT,
    carrier TEXT,
    FOREIGN KEY (order_no, line) REFERENCES order_lines (order_no, line)
);
CREATE TABLE tokens (id TEXT PRIMARY KEY, label TEXT);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    sender_id INTEGER REFERENCES users(id),
    recipient_id INTEGER REFERENCES users(id),
    body TEXT
);
"""

TOKEN_IDS = [str(uuid.UUID(int=n, version=4)) for n in (1, 2, 3)]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO categories VALUES (?, ?)", [(1, "Books"), (2, UNICODE)])
    conn.executemany("INSERT INTO users VALUES (?, ?)", [(1, "ann"), (2, "bob"), (3, None)])
    conn.executemany(
        "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (1, UNICODE, "SKU-1", 9.5, 1, "2024-01-02 03:04:05", 2),
            (2, BIG, None, None, 0, None, None),
            (3, "plain", "SKU-3", 0.25, None, "2023-12-31 23:59:59", 1),
            (4, None, None, None, None, None, 1),
        ],
    )
    conn.executemany(
        "INSERT INTO reviews VALUES (?, ?, ?, ?)",
        [
            (30, 1, 1, "third, by ann"),
            (10, 1, 2, "first, by bob"),
            (20, 1, 3, UNICODE),
            (40, 2, None, BIG),
            (50, 4, 2, None),
        ],
    )
    conn.executemany("INSERT INTO order_lines VALUES (?, ?, ?)", [(7, "a", 1), (7, "b", 2), (8, "a", 3)])
    conn.executemany(
        "INSERT INTO shipments VALUES (?, ?, ?, ?)",
        [(1, 7, "b", "ups"), (2, 7, "a", "dhl"), (3, 7, "b", "fedex")],
    )
    conn.executemany("INSERT INTO tokens VALUES (?, ?)", [(t, f"token {i}") for i, t in enumerate(TOKEN_IDS)])
    conn.execute("INSERT INTO messages VALUES (1, 1, 2, 'hi')")
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def source(db: Path) -> Iterator[Source]:
    s = open_source_url(f"sqlite:///{db}")
    yield s
    s.close()


def product_config(**kw: Any) -> IndexConfig:
    return IndexConfig.model_validate({**shop_index_config().model_dump(), **kw})


def all_rows(source: Source, plan: IndexPlan, builder: DocumentBuilder) -> list[tuple[Any, ...]]:
    return source.read_page(plan.table, plan.id_columns, builder.read_columns, KeyRange(None, None), None, 10_000)


def build_all(source: Source, cfg: IndexConfig) -> dict[str, dict[str, Any]]:
    plan = resolve_index(source, cfg, "indexes[0]")
    builder = DocumentBuilder(source, plan)
    docs, errors = builder.build(all_rows(source, plan, builder))
    assert errors == []
    return {d.id: orjson.loads(d.source) for d in docs}


def built(source: Source, cfg: IndexConfig) -> dict[str, BuiltDocument]:
    plan = resolve_index(source, cfg, "indexes[0]")
    builder = DocumentBuilder(source, plan)
    docs, errors = builder.build(all_rows(source, plan, builder))
    assert errors == []
    return {d.id: d for d in docs}


# -- structure ---------------------------------------------------------------------------------------


def test_documents_have_nested_structure(source: Source) -> None:
    docs = build_all(source, product_config())
    assert list(docs) == ["1", "2", "3", "4"]
    assert docs["1"] == {
        "id": 1,
        "name": UNICODE,
        "sku": "SKU-1",
        "price": 9.5,
        "in_stock": True,
        "created": "2024-01-02T03:04:05",
        "category_id": 2,
        "category": {"id": 2, "name": UNICODE},
        "reviews": [
            {"id": 10, "product_id": 1, "author_id": 2, "body": "first, by bob", "author": {"id": 2, "name": "bob"}},
            {"id": 20, "product_id": 1, "author_id": 3, "body": UNICODE, "author": {"id": 3, "name": None}},
            {"id": 30, "product_id": 1, "author_id": 1, "body": "third, by ann", "author": {"id": 1, "name": "ann"}},
        ],
    }


def test_null_foreign_keys_give_none_and_empty_lists(source: Source) -> None:
    docs = build_all(source, product_config())
    # no category, one review whose author is NULL
    assert docs["2"]["category_id"] is None
    assert docs["2"]["category"] is None
    assert docs["2"]["price"] is None and docs["2"]["created"] is None and docs["2"]["sku"] is None
    assert docs["2"]["in_stock"] is False
    assert [r["id"] for r in docs["2"]["reviews"]] == [40]
    assert docs["2"]["reviews"][0]["author_id"] is None
    assert docs["2"]["reviews"][0]["author"] is None
    # no reviews at all
    assert docs["3"]["reviews"] == []
    assert docs["3"]["category"] == {"id": 1, "name": "Books"}
    assert docs["3"]["in_stock"] is None
    # a NULL name and a review with a NULL body
    assert docs["4"]["name"] is None
    assert docs["4"]["reviews"] == [
        {"id": 50, "product_id": 4, "author_id": 2, "body": None, "author": {"id": 2, "name": "bob"}}
    ]


def test_unicode_and_large_text_round_trip_exactly(source: Source) -> None:
    docs = build_all(source, product_config())
    assert docs["1"]["name"] == UNICODE
    assert docs["1"]["category"]["name"] == UNICODE
    assert docs["1"]["reviews"][1]["body"] == UNICODE
    assert len(BIG) == 100 * 1024
    assert docs["2"]["name"] == BIG
    assert docs["2"]["reviews"][0]["body"] == BIG
    raw = built(source, product_config())["1"].source
    assert UNICODE.encode("utf-8") in raw  # real UTF-8, not escapes


def test_columns_limit_fields_but_keys_are_still_read(source: Source) -> None:
    cfg = IndexConfig(
        alias="products",
        table="products",
        columns=["name"],
        relations=[
            RelationConfig(name="category", type="object", table="categories", columns=["name"]),
            RelationConfig(
                name="reviews",
                type="nested",
                table="reviews",
                columns=["body"],
                relations=[RelationConfig(name="author", type="object", table="users", columns=["name"])],
            ),
        ],
    )
    docs = build_all(source, cfg)
    assert docs["1"] == {
        "name": UNICODE,
        "category": {"name": UNICODE},
        "reviews": [
            {"body": "first, by bob", "author": {"name": "bob"}},
            {"body": UNICODE, "author": {"name": None}},
            {"body": "third, by ann", "author": {"name": "ann"}},
        ],
    }


def test_order_by_is_honoured(source: Source) -> None:
    cfg = IndexConfig(
        alias="products",
        table="products",
        columns=["id"],
        relations=[RelationConfig(name="reviews", type="nested", table="reviews", columns=["id"], order_by=["body"])],
    )
    docs = build_all(source, cfg)
    # UNICODE ("Grüße ...") < "first, by bob" < "third, by ann"; review id order would be 10, 20, 30
    assert [r["id"] for r in docs["1"]["reviews"]] == [20, 10, 30]


def test_nested_relation_over_composite_foreign_key(source: Source) -> None:
    cfg = IndexConfig(
        alias="lines",
        table="order_lines",
        relations=[RelationConfig(name="shipments", type="nested", table="shipments", columns=["id", "carrier"])],
    )
    docs = build_all(source, cfg)
    assert docs == {
        "7|a": {"order_no": 7, "line": "a", "qty": 1, "shipments": [{"id": 2, "carrier": "dhl"}]},
        "7|b": {
            "order_no": 7,
            "line": "b",
            "qty": 2,
            "shipments": [{"id": 1, "carrier": "ups"}, {"id": 3, "carrier": "fedex"}],
        },
        "8|a": {"order_no": 8, "line": "a", "qty": 3, "shipments": []},
    }


# -- children are fetched per page -------------------------------------------------------------------


@pytest.fixture
def big_source(tmp_path: Path) -> Iterator[Source]:
    path = tmp_path / "many.db"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO categories VALUES (?, ?)", [(i, f"cat {i}") for i in range(1, 6)])
    conn.executemany("INSERT INTO users VALUES (?, ?)", [(i, f"user {i}") for i in range(1, 41)])
    conn.executemany(
        "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(i, f"product {i}", f"S{i}", i / 4, i % 2, "2024-05-06 07:08:09", 1 + i % 5) for i in range(1, 701)],
    )
    conn.executemany(
        "INSERT INTO reviews VALUES (?, ?, ?, ?)",
        [(p * 10 + j, p, 1 + (p + j) % 40, f"review {j} of {p}") for p in range(1, 701) for j in range(3)],
    )
    conn.commit()
    conn.close()
    s = open_source_url(f"sqlite:///{path}")
    yield s
    s.close()


def count_statements_while_building(source: Source, n: int) -> tuple[int, list[BuiltDocument]]:
    plan = resolve_index(source, product_config(), "indexes[0]")
    builder = DocumentBuilder(source, plan)
    rows = source.read_page(plan.table, plan.id_columns, builder.read_columns, KeyRange(None, None), None, n)
    assert len(rows) == n
    statements: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    sa.event.listen(source.engine, "before_cursor_execute", on_execute)
    try:
        docs, errors = builder.build(rows)
    finally:
        sa.event.remove(source.engine, "before_cursor_execute", on_execute)
    assert errors == []
    return len(statements), docs


def test_children_are_fetched_per_page_not_per_row(big_source: Source) -> None:
    few, small_docs = count_statements_while_building(big_source, 5)
    many, docs = count_statements_while_building(big_source, 500)
    assert len(docs) == 500 and len(small_docs) == 5
    assert many <= 10, f"{many} statements for a page of 500"
    assert many == few, "statement count must not grow with the page"
    for d in docs:
        body = orjson.loads(d.source)
        pid = body["id"]
        assert body["category"] == {"id": 1 + pid % 5, "name": f"cat {1 + pid % 5}"}
        assert [r["id"] for r in body["reviews"]] == [pid * 10, pid * 10 + 1, pid * 10 + 2]
        assert all(r["author"]["id"] == r["author_id"] for r in body["reviews"])


# -- ids and hashes ----------------------------------------------------------------------------------


class _fresh:
    def __init__(self, db: Path) -> None:
        self.source = open_source_url(f"sqlite:///{db}")

    def __enter__(self) -> Source:
        return self.source

    def __exit__(self, *_: object) -> None:
        self.source.close()


def test_single_key_ids_are_the_value_as_string(source: Source) -> None:
    assert set(built(source, product_config())) == {"1", "2", "3", "4"}
    docs = built(source, IndexConfig(alias="tokens", table="tokens"))
    assert sorted(docs) == sorted(TOKEN_IDS)
    for token_id, doc in docs.items():
        assert orjson.loads(doc.source)["id"] == token_id


def test_composite_key_ids_join_with_a_bar(source: Source) -> None:
    docs = built(source, IndexConfig(alias="lines", table="order_lines"))
    assert sorted(docs) == ["7|a", "7|b", "8|a"]
    assert orjson.loads(docs["7|b"].source) == {"order_no": 7, "line": "b", "qty": 2}


def test_configured_id_columns_make_the_id(source: Source) -> None:
    docs = built(source, IndexConfig(alias="lines", table="order_lines", id=["line", "order_no"]))
    assert sorted(docs) == ["a|7", "a|8", "b|7"]


def test_hash_is_stable_for_the_same_rows(source: Source, db: Path) -> None:
    first = built(source, product_config())
    again = built(source, product_config())
    with _fresh(db) as other:
        elsewhere = built(other, product_config())
    for doc_id, doc in first.items():
        assert again[doc_id].hash == doc.hash == elsewhere[doc_id].hash
        assert doc.hash == content_hash(doc.source)
        assert doc.source == dumps_document(orjson.loads(doc.source))  # canonical form
    assert len({d.hash for d in first.values()}) == len(first)


def test_changing_a_child_changes_the_parent_hash(source: Source, db: Path) -> None:
    before = built(source, product_config())
    conn = sqlite3.connect(db)
    conn.execute("UPDATE reviews SET body = 'edited' WHERE id = 30")
    conn.commit()
    conn.close()
    after = built(source, product_config())
    assert after["1"].hash != before["1"].hash
    assert orjson.loads(after["1"].source)["reviews"][2]["body"] == "edited"
    for other in ("2", "3", "4"):
        assert after[other].hash == before[other].hash


def test_changing_a_grandchild_changes_the_parent_hash(source: Source, db: Path) -> None:
    before = built(source, product_config())
    conn = sqlite3.connect(db)
    conn.execute("UPDATE users SET name = 'robert' WHERE id = 2")
    conn.commit()
    conn.close()
    after = built(source, product_config())
    assert after["1"].hash != before["1"].hash  # bob wrote review 10 of product 1
    assert after["4"].hash != before["4"].hash  # and review 50 of product 4
    assert after["3"].hash == before["3"].hash


def test_unserializable_value_is_a_document_error(source: Source, db: Path) -> None:
    plan = resolve_index(source, IndexConfig(alias="tokens", table="tokens"), "indexes[0]")
    builder = DocumentBuilder(source, plan)
    rows = [(TOKEN_IDS[0], "fine"), (TOKEN_IDS[1], object())]
    docs, errors = builder.build(rows)
    assert [d.id for d in docs] == [TOKEN_IDS[0]]
    assert [e.doc_id for e in errors] == [TOKEN_IDS[1]]
    assert errors[0].error_class == "UnserializableValue"


def test_date_values_serialise_as_iso(source: Source) -> None:
    plan = resolve_index(source, IndexConfig(alias="products", table="products", columns=["created"]), "indexes[0]")
    builder = DocumentBuilder(source, plan)
    rows = all_rows(source, plan, builder)
    assert isinstance(rows[0][0], dt.datetime)
    docs, _ = builder.build(rows)
    assert orjson.loads(docs[0].source) == {"created": "2024-01-02T03:04:05"}


# -- mapping inference -------------------------------------------------------------------------------


def test_mapping_is_inferred_from_the_schema(source: Source) -> None:
    plan = resolve_index(source, product_config(), "indexes[0]")
    assert infer_mapping(plan, "indexes[0]") == {
        "properties": {
            "id": {"type": "long"},
            "name": {"type": "text"},
            "sku": {"type": "keyword"},
            "price": {"type": "double"},
            "in_stock": {"type": "boolean"},
            "created": {"type": "date"},
            "category_id": {"type": "long"},
            "category": {"type": "object", "properties": {"id": {"type": "long"}, "name": {"type": "keyword"}}},
            "reviews": {
                "type": "nested",
                "properties": {
                    "id": {"type": "long"},
                    "product_id": {"type": "long"},
                    "author_id": {"type": "long"},
                    "body": {"type": "text"},
                    "author": {"type": "object", "properties": {"id": {"type": "long"}, "name": {"type": "text"}}},
                },
            },
        }
    }


def test_mapping_overrides_apply(source: Source) -> None:
    cfg = product_config(
        fields={
            "name": FieldOverride(analyzer="english", keyword=True, copy_to=["all_text"]),
            "reviews.body": FieldOverride(analyzer="english", copy_to="all_text"),
            "reviews.author.name": FieldOverride(type="keyword"),
            "price": FieldOverride(index=False),
        }
    )
    props = infer_mapping(resolve_index(source, cfg, "indexes[0]"), "indexes[0]")["properties"]
    assert props["name"] == {
        "type": "text",
        "analyzer": "english",
        "copy_to": ["all_text"],
        "fields": {"keyword": {"type": "keyword", "ignore_above": 256}},
    }
    assert props["all_text"] == {"type": "text"}
    assert props["reviews"]["properties"]["body"] == {"type": "text", "analyzer": "english", "copy_to": ["all_text"]}
    assert props["reviews"]["properties"]["author"]["properties"]["name"] == {"type": "keyword"}
    assert props["price"] == {"type": "double", "index": False}
    assert props["sku"] == {"type": "keyword"}  # untouched


def test_override_of_unknown_path_names_path_and_known_fields(source: Source) -> None:
    cfg = product_config(fields={"reviews.title": FieldOverride(analyzer="english")})
    plan = resolve_index(source, cfg, "indexes[0]")
    with pytest.raises(ConfigError) as err:
        infer_mapping(plan, "indexes[0]")
    msg = str(err.value)
    assert "indexes[0].fields.reviews.title" in msg
    for known in ("name", "sku", "category.name", "reviews.body", "reviews.author.name"):
        assert known in msg


def test_override_through_a_scalar_is_a_config_error(source: Source) -> None:
    plan = resolve_index(source, product_config(fields={"name.first": FieldOverride(keyword=True)}), "indexes[0]")
    with pytest.raises(ConfigError, match=r"indexes\[0\]\.fields\.name\.first"):
        infer_mapping(plan, "indexes[0]")


def test_analyzer_on_a_keyword_is_a_config_error(source: Source) -> None:
    plan = resolve_index(source, product_config(fields={"sku": FieldOverride(analyzer="english")}), "indexes[0]")
    with pytest.raises(ConfigError, match=r"indexes\[0\]\.fields\.sku\.analyzer"):
        infer_mapping(plan, "indexes[0]")


# -- configuration errors ----------------------------------------------------------------------------


def config_error(source: Source, cfg: IndexConfig) -> str:
    with pytest.raises(ConfigError) as err:
        resolve_index(source, cfg, "indexes[0]")
    return str(err.value)


def test_unknown_table(source: Source) -> None:
    msg = config_error(source, IndexConfig(alias="x", table="prodcts"))
    assert "indexes[0].table" in msg and "'prodcts'" in msg
    assert "products" in msg  # the known tables are listed


def test_unknown_column(source: Source) -> None:
    msg = config_error(source, IndexConfig(alias="x", table="products", columns=["name", "colour"]))
    assert "indexes[0].columns" in msg and "'colour'" in msg
    assert "sku" in msg


def test_unknown_id_column(source: Source) -> None:
    msg = config_error(source, IndexConfig(alias="x", table="products", id=["uid"]))
    assert "indexes[0].id" in msg and "'uid'" in msg


def test_unknown_relation_table(source: Source) -> None:
    cfg = IndexConfig(
        alias="x",
        table="products",
        relations=[RelationConfig(name="category", type="object", table="categorys")],
    )
    msg = config_error(source, cfg)
    assert "indexes[0].relations[0].table" in msg and "'categorys'" in msg


def test_unknown_table_of_a_deeper_relation(source: Source) -> None:
    cfg = product_config()
    cfg.relations[1].relations[0].table = "people"
    msg = config_error(source, cfg)
    assert "indexes[0].relations[1].relations[0].table" in msg and "'people'" in msg


def test_unknown_relation_column(source: Source) -> None:
    cfg = IndexConfig(
        alias="x",
        table="products",
        relations=[RelationConfig(name="category", type="object", table="categories", columns=["title"])],
    )
    msg = config_error(source, cfg)
    assert "indexes[0].relations[0].columns" in msg and "'title'" in msg


def test_object_relation_with_two_foreign_keys_is_ambiguous(source: Source) -> None:
    cfg = IndexConfig(
        alias="messages",
        table="messages",
        relations=[RelationConfig(name="sender", type="object", table="users")],
    )
    msg = config_error(source, cfg)
    assert "indexes[0].relations[0]" in msg
    assert "'messages'" in msg and "'users'" in msg and "local_key" in msg


def test_nested_relation_with_two_foreign_keys_is_ambiguous(source: Source) -> None:
    cfg = IndexConfig(
        alias="users",
        table="users",
        relations=[RelationConfig(name="inbox", type="nested", table="messages")],
    )
    msg = config_error(source, cfg)
    assert "indexes[0].relations[0]" in msg
    assert "'messages'" in msg and "'users'" in msg and "remote_key" in msg


def test_relation_without_any_foreign_key(source: Source) -> None:
    cfg = IndexConfig(
        alias="tokens",
        table="tokens",
        relations=[RelationConfig(name="lines", type="nested", table="order_lines")],
    )
    msg = config_error(source, cfg)
    assert "indexes[0].relations[0]" in msg and "'order_lines'" in msg


def test_explicit_keys_resolve_an_ambiguous_relation(source: Source) -> None:
    cfg = IndexConfig(
        alias="messages",
        table="messages",
        columns=["body"],
        relations=[
            RelationConfig(name="sender", type="object", table="users", local_key="sender_id"),
            RelationConfig(name="recipient", type="object", table="users", local_key=["recipient_id"]),
        ],
    )
    docs = build_all(source, cfg)
    assert docs == {"1": {"body": "hi", "sender": {"id": 1, "name": "ann"}, "recipient": {"id": 2, "name": "bob"}}}


def test_relation_name_clashing_with_a_column(source: Source) -> None:
    cfg = IndexConfig(
        alias="x",
        table="products",
        relations=[RelationConfig(name="name", type="object", table="categories")],
    )
    msg = config_error(source, cfg)
    assert "indexes[0].relations[0].name" in msg and "'name'" in msg


# -- mapping overrides (indexes[].mapping) ----------------------------------------------------------------


def mapped(source: Source, **kw: Any) -> dict[str, Any]:
    return infer_mapping(resolve_index(source, product_config(**kw), "p.yaml: indexes[0]"), "p.yaml: indexes[0]")


def test_mapping_override_merges_over_the_inferred_mapping(source: Source) -> None:
    mapping = mapped(
        source,
        fields={"name": FieldOverride(keyword=True)},
        mapping={
            "dynamic": "strict",
            "date_detection": False,
            "properties": {
                "price": {"type": "scaled_float", "scaling_factor": 100},
                "name": {"fields": {"folded": {"type": "text", "analyzer": "standard"}}},
                "created": {"format": "yyyy-MM-dd'T'HH:mm:ss||strict_date_optional_time"},
                "category": {"type": "nested", "properties": {"name": {"type": "text", "copy_to": "all_text"}}},
                "reviews": {"properties": {"author": {"properties": {"name": {"type": "keyword"}}}}},
            },
        },
    )
    assert mapping["dynamic"] == "strict" and mapping["date_detection"] is False
    props = mapping["properties"]
    assert props["price"] == {"type": "scaled_float", "scaling_factor": 100}
    # the `fields` shorthand's keyword sub-field stays; the override adds its own
    assert props["name"] == {
        "type": "text",
        "fields": {
            "keyword": {"type": "keyword", "ignore_above": 256},
            "folded": {"type": "text", "analyzer": "standard"},
        },
    }
    assert props["created"] == {"type": "date", "format": "yyyy-MM-dd'T'HH:mm:ss||strict_date_optional_time"}
    assert props["category"] == {
        "type": "nested",
        "properties": {"id": {"type": "long"}, "name": {"type": "text", "copy_to": "all_text"}},
    }
    assert props["all_text"] == {"type": "text"}  # a copy_to target, as `fields` makes one
    assert props["reviews"]["properties"]["author"]["properties"]["name"] == {"type": "keyword"}
    assert props["sku"] == {"type": "keyword"}  # untouched


def test_mapping_override_wins_over_the_fields_shorthand(source: Source) -> None:
    props = mapped(
        source, fields={"sku": FieldOverride(type="text")}, mapping={"properties": {"sku": {"type": "wildcard"}}}
    )["properties"]
    assert props["sku"] == {"type": "wildcard"}


def test_a_new_type_defines_the_field_afresh(source: Source) -> None:
    props = mapped(
        source,
        fields={"name": FieldOverride(analyzer="english", keyword=True, copy_to=["all_text"])},
        mapping={"properties": {"name": {"type": "keyword", "ignore_above": 64}, "sku": {"ignore_above": 10}}},
    )["properties"]
    assert props["name"] == {"type": "keyword", "ignore_above": 64}
    assert props["sku"] == {"type": "keyword", "ignore_above": 10}  # same type: merged


def test_dynamic_booleans_are_booleans(source: Source) -> None:
    assert mapped(source, mapping={"dynamic": "false"})["dynamic"] is False
    assert "dynamic" not in mapped(source)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            {"properties": {"reviews": {"properties": {"title": {"type": "text"}}}}},
            "p.yaml: indexes[0].mapping.properties.reviews.properties.title: no such field in the documents "
            "(fields: category, category.id, category.name, category_id, created, id, in_stock, name, price, "
            "reviews, reviews.author, reviews.author.id, reviews.author.name, reviews.author_id, reviews.body, "
            "reviews.id, reviews.product_id, sku)",
        ),
        (
            {"properties": {"price": {"type": "money"}}},
            "p.yaml: indexes[0].mapping.properties.price.type: unknown field type 'money' (known: binary, boolean, "
            "byte, date, date_nanos, dense_vector, double, flat_object, flattened, float, geo_point, half_float, "
            "integer, ip, keyword, knn_vector, long, nested, object, scaled_float, short, text, wildcard)",
        ),
        (
            {"properties": {"name": {"type": "object"}}},
            "p.yaml: indexes[0].mapping.properties.name.type: this field holds a column's values, not objects; "
            "object is for relations",
        ),
        (
            {"properties": {"category": {"type": "keyword"}}},
            "p.yaml: indexes[0].mapping.properties.category.type: this field holds a relation's objects; its type "
            "can be object or nested",
        ),
        (
            {"properties": {"name": {"properties": {"first": {"type": "text"}}}}},
            "p.yaml: indexes[0].mapping.properties.name.properties: 'name' holds text values, not objects",
        ),
        (
            {"properties": {"name": {"fields": {"raw": {"ignore_above": 10}}}}},
            "p.yaml: indexes[0].mapping.properties.name.fields.raw: a multi-field needs a 'type'",
        ),
        (
            {"properties": {"name": {"fields": {"raw": {"type": "nested"}}}}},
            "p.yaml: indexes[0].mapping.properties.name.fields.raw.type: 'nested' is not a type a multi-field can have",
        ),
        (
            {"properties": {"category_id": {"type": "join"}}},
            "p.yaml: indexes[0].mapping.properties.category_id.type: declare parent-child documents with a relation "
            "of type: join",
        ),
        (
            {"properties": {"_key": {"type": "keyword"}}},
            "p.yaml: indexes[0].mapping.properties._key: no such field in the documents (fields: category, "
            "category.id, category.name, category_id, created, id, in_stock, name, price, reviews, reviews.author, "
            "reviews.author.id, reviews.author.name, reviews.author_id, reviews.body, reviews.id, "
            "reviews.product_id, sku)",
        ),
    ],
    ids=[
        "unknown-field",
        "unknown-type",
        "scalar-as-object",
        "relation-as-scalar",
        "properties-of-scalar",
        "multi-field-without-type",
        "multi-field-nested",
        "join-type",
        "reserved-key-field",
    ],
)
def test_mapping_override_errors_name_the_key_path(source: Source, override: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        mapped(source, mapping=override)
    assert str(err.value) == expected


def test_float_paths_leave_out_relations_without_floats() -> None:
    import sqlalchemy as sa

    from sparkindex.documents.floats import float_paths, non_finite_path
    from sparkindex.documents.plan import RelationPlan
    from sparkindex.sources.base import Column, TableInfo

    def table(name: str, column: str, kind: sa.types.TypeEngine[Any]) -> TableInfo:
        t = sa.Table(name, sa.MetaData(), sa.Column(column, kind))
        return TableInfo(name, {column: Column(column, kind, True)}, (), (), t)

    tags = RelationPlan("tags", "nested", table("tags", "label", sa.Text()), ["label"], ["id"], ["pid"], [])
    prices = RelationPlan("prices", "nested", table("prices", "amount", sa.Float()), ["amount"], ["id"], ["pid"], [])
    paths = float_paths(table("p", "name", sa.Text()), ["name"], [tags, prices])
    assert paths == (frozenset(), {"prices": (frozenset({"amount"}), {})})
    doc = {"name": "x", "tags": [{"label": "a"}], "prices": [{"amount": 1.0}, {"amount": float("nan")}]}
    assert non_finite_path(doc, paths) == "prices.amount"
