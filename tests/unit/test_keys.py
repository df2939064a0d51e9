"""Row keys outside the database: unambiguous document ids and stored cursors of every key type."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config.indexes import IndexConfig
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.keys import document_id, dump_key, load_key, split_document_id
from sparkindex.resources import open_source_url
from sparkindex.sources.base import Column, KeyRange, TableInfo, coerce_key

HOSTILE_PARTS: list[Any] = ["", None, "|", "\\", "\\N", "N", "x|y", "a\\|b", "\\\\|", "ü|東", "|\\N", "\\N|"]


def test_separator_inside_parts_does_not_collide() -> None:
    assert document_id(("x|y", "z")) != document_id(("x", "y|z"))
    assert document_id(("x\\", "|y")) != document_id(("x\\|", "y"))


def test_null_part_differs_from_empty_and_from_the_text_backslash_n() -> None:
    ids = {document_id(k) for k in [(None, ""), ("", ""), ("", None), (None, None), ("\\N", ""), ("N", "")]}
    assert len(ids) == 6


def test_every_pair_of_hostile_parts_gets_its_own_id_and_splits_back() -> None:
    keys = [(a, b) for a in HOSTILE_PARTS for b in HOSTILE_PARTS]
    ids = [document_id(k) for k in keys]
    assert len(set(ids)) == len(keys)
    for key, doc_id in zip(keys, ids, strict=True):
        assert split_document_id(doc_id, 2) == list(key)
    triple = ("a|", None, "\\")
    assert split_document_id(document_id(triple), 3) == list(triple)


def test_single_column_ids_are_the_plain_value() -> None:
    assert document_id((42,)) == "42"
    assert document_id(("a|b",)) == "a|b"
    assert split_document_id("a|b", 1) == ["a|b"]


def test_split_refuses_the_wrong_number_of_parts() -> None:
    with pytest.raises(ValueError, match="does not have 3 key parts"):
        split_document_id(document_id(("a", "b")), 3)


STORED_KEYS = [
    (decimal.Decimal("12.500"), decimal.Decimal("-0.001")),
    (b"\x00\xff|", bytes(range(16))),
    ("a|b", None),
    (7, 2.5),
    (dt.timedelta(seconds=90061, microseconds=5),),
]


@pytest.mark.parametrize("key", STORED_KEYS)
def test_stored_keys_come_back_equal_and_of_the_same_type(key: tuple[Any, ...]) -> None:
    text = dump_key(key)
    assert text is not None
    back = load_key(text)
    assert back == key
    assert [type(v) for v in back] == [type(v) for v in key]


def test_no_key_stays_none() -> None:
    assert dump_key(None) is None and load_key(None) is None


# -- coerce_key: what load_key returns, back in each column's type -----------------------------------

TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "num": sa.Numeric(12, 3),
    "flt": sa.Float(),
    "int": sa.Integer(),
    "raw": sa.LargeBinary(),
    "day": sa.Date(),
    "at": sa.DateTime(),
    "tm": sa.Time(),
    "uid": sa.Uuid(),
    "txt": sa.String(10),
}
VALUES: dict[str, Any] = {
    "num": decimal.Decimal("12.345"),
    "flt": 0.1,
    "int": 7,
    "raw": b"\x00\x01|",
    "day": dt.date(2024, 2, 29),
    "at": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "tm": dt.time(12, 30, 1),
    "uid": uuid.UUID(int=5, version=4),
    "txt": "Ab|c\\",
}


@pytest.mark.parametrize("column", list(TYPES))
def test_coerce_key_restores_every_key_type_after_storage(column: str) -> None:
    info = TableInfo("t", {column: Column(column, TYPES[column], False)}, (column,), (), sa.Table("t", sa.MetaData()))
    stored = load_key(dump_key((VALUES[column],)))
    restored = coerce_key(info, [column], stored)
    assert restored == (VALUES[column],)
    assert type(restored[0]) is type(VALUES[column])  # type: ignore[index]


def test_coerce_key_turns_json_numbers_into_exact_decimals() -> None:
    info = TableInfo("t", {"n": Column("n", sa.Numeric(10, 2), False)}, ("n",), (), sa.Table("t", sa.MetaData()))
    assert coerce_key(info, ["n"], (0.1,)) == (decimal.Decimal("0.1"),)
    assert coerce_key(info, ["n"], (3,)) == (decimal.Decimal(3),)


# -- rows that cannot be built are reported, never dropped ------------------------------------------


@pytest.fixture
def floats_source(tmp_path: Path) -> Iterator[Any]:
    conn = sqlite3.connect(tmp_path / "f.db")
    conn.execute("CREATE TABLE m (id TEXT PRIMARY KEY NOT NULL, v REAL, d NUMERIC, o TEXT)")
    conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, m_id TEXT REFERENCES m(id), w REAL)")
    conn.commit()
    conn.close()
    source = open_source_url(f"sqlite:///{tmp_path / 'f.db'}")
    yield source
    source.close()


def test_every_row_is_a_document_or_a_failure(floats_source: Any) -> None:
    cfg = IndexConfig(alias="m", table="m", columns=["id", "v", "d", "o"])
    builder = DocumentBuilder(floats_source, resolve_index(floats_source, cfg, "indexes[0]"))
    rows = [
        ("ok", 1.5, decimal.Decimal("2.25"), "x"),
        ("nan", math.nan, None, "x"),
        ("inf", math.inf, None, None),
        ("-inf", -math.inf, None, None),
        ("dec-nan", 1.0, decimal.Decimal("NaN"), None),
        ("object", 1.0, None, object()),
        ("huge", 1.0, None, 2**70),
        ("a|b", None, None, None),
    ]
    docs, failures = builder.build(rows)
    assert len(docs) + len(failures) == len(rows)
    assert [d.id for d in docs] == ["ok", "a|b"]
    assert {f.doc_id: f.error_class for f in failures} == {
        "nan": "NonFinite",
        "inf": "NonFinite",
        "-inf": "NonFinite",
        "dec-nan": "NonFinite",
        "object": "UnserializableValue",
        "huge": "UnserializableValue",
    }
    assert "field 'v' is NaN or infinite" in str(failures[0])


def test_a_non_finite_child_value_fails_its_root_document(floats_source: Any) -> None:
    conn = floats_source.engine.raw_connection()
    cur = conn.cursor()
    cur.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", [("p", 1.0, 1, "x"), ("q", 2.0, 2, "y")])
    cur.executemany("INSERT INTO c VALUES (?, ?, ?)", [(1, "p", 0.5), (2, "q", math.inf)])
    conn.commit()
    conn.close()
    cfg = IndexConfig.model_validate(
        {"alias": "m", "table": "m", "relations": [{"name": "children", "type": "nested", "table": "c"}]}
    )
    builder = DocumentBuilder(floats_source, resolve_index(floats_source, cfg, "indexes[0]"))
    page = builder.page(KeyRange(None, None), None, 10)
    assert page.rows == 2
    assert [d.id for d in page.docs] == ["p"]
    assert [(f.doc_id, f.error_class) for f in page.failures] == [("q", "NonFinite")]
    assert "children.w" in str(page.failures[0])


def test_sort_key_orders_like_the_values_part_by_part() -> None:
    import decimal

    from sparkindex.keys import sort_key

    ordered: list[list[object]] = [
        [[None], [False], [True]],
        [[-(2**63)], [-5], [0], [3], [2**40], [2**63 - 1]],
        [[-1e300], [-2.5], [0.5], [decimal.Decimal("3.25")], [1e300]],
        [[""], ["a"], ["a\x00"], ["a\x00b"], ["ab"], ["b"], ["z"], ["é"]],
        [["a", "z"], ["a\x00", "a"], ["ab", ""], ["ab", "a"]],
        [[b"\x00"], [b"\x00\x01"], [b"\x01"]],
    ]
    for group in ordered:
        keys = [sort_key(v) for v in group]
        assert keys == sorted(keys), group
        assert len(set(keys)) == len(keys), group
        assert all(k and set(k) <= set("0123456789abcdef") for k in keys)
