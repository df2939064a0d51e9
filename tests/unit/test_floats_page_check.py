"""The page-wide float check that lets the builder skip its per-document NaN walk.

The builder walks every document for NaN and infinity only when :func:`finite_columns` cannot
clear the page. So the check may answer "maybe" for a clean page, never "clean" for a page that
holds one: each test below plants a non-finite value where a too-hopeful check would miss it (a
deep relation, a join child, text in a REAL column, a sum that overflows) and expects exactly the
documents the walk alone would fail.
"""

from __future__ import annotations

import decimal
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config.indexes import IndexConfig
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.documents.floats import finite_columns
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange, Source

D = decimal.Decimal


@pytest.mark.parametrize(
    "bad",
    [math.nan, math.inf, -math.inf, D("NaN"), D("sNaN"), D("Infinity"), D("-Infinity"), "NaN", "Infinity", "1.5"],
    ids=repr,
)
@pytest.mark.parametrize("where", [0, 3, 6])
def test_a_column_holding_a_non_finite_value_is_never_cleared(bad: Any, where: int) -> None:
    values: list[Any] = [1.5, None, -2.0, 0.0, 1e300, None, 7.25]
    values[where] = bad
    rows = [("id", v, "text") for v in values]
    assert finite_columns(rows, [1]) is False
    assert finite_columns(rows, [2, 1]) is False  # text beside it: cannot add, so not cleared


def test_clean_columns_of_every_numeric_type_are_cleared() -> None:
    rows = [(1.5, D("2.25"), 1, None), (None, D("-0"), True, None), (-1e-300, None, 2**40, None)]
    assert finite_columns(rows, [0, 1, 2, 3])
    assert finite_columns([], [0])
    assert finite_columns(rows, [])


def test_finite_values_whose_sum_overflows_are_left_to_the_walk() -> None:
    assert finite_columns([(1e308,), (1e308,)], [0]) is False
    assert finite_columns([(2**1100,), (1,)], [0]) is False
    assert finite_columns([(1.0,), (D("1e400"),)], [0]) is False  # Decimal beside float


# -- the builder: the documents failed are exactly those the walk finds ------------------------------
@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    conn = sqlite3.connect(tmp_path / "f.db")
    conn.executescript(
        """
        CREATE TABLE shops (id TEXT PRIMARY KEY NOT NULL, rating REAL, kind TEXT);
        CREATE TABLE items (id INTEGER PRIMARY KEY, shop_id TEXT REFERENCES shops(id), price REAL,
                            maker_id INTEGER REFERENCES makers(id));
        CREATE TABLE makers (id INTEGER PRIMARY KEY, score REAL, name TEXT);
        CREATE TABLE staff (id INTEGER PRIMARY KEY, shop_id TEXT REFERENCES shops(id), wage REAL);
        """
    )
    shops = [(f"S|{i}\\", 1.0 + i, "Kind é") for i in range(40)]
    shops[7] = ("S|7\\", None, None)
    conn.executemany("INSERT INTO shops VALUES (?, ?, ?)", shops)
    makers = [(m, 0.5 * m, f"M{m}") for m in range(1, 11)]
    conn.executemany("INSERT INTO makers VALUES (?, ?, ?)", makers)
    items = [(n, f"S|{n % 40}\\", 2.5 * n, 1 + n % 10) for n in range(1, 161)]
    conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", items)
    conn.executemany("INSERT INTO staff VALUES (?, ?, ?)", [(n, f"S|{n % 40}\\", 10.0 * n) for n in range(1, 81)])
    conn.commit()
    conn.close()
    s = open_source_url(f"sqlite:///{tmp_path / 'f.db'}")
    yield s
    s.close()


def set_value(source: Source, sql: str, *params: Any) -> None:
    conn = source.engine.raw_connection()  # type: ignore[attr-defined]
    conn.cursor().execute(sql, params)
    conn.commit()
    conn.close()


def failed(source: Source, join: bool = False) -> dict[str, str]:
    items = {
        "name": "items",
        "type": "nested",
        "table": "items",
        "relations": [{"name": "maker", "type": "object", "table": "makers"}],
    }
    relations: list[dict[str, Any]] = [items]
    if join:
        relations.append({"name": "staff", "type": "join", "table": "staff"})
    cfg = IndexConfig.model_validate({"alias": "shops", "table": "shops", "relations": relations})
    page = DocumentBuilder(source, resolve_index(source, cfg, "indexes[0]")).page(KeyRange(None, None), None, 100)
    assert len(page.docs) + len(page.failures) == page.rows + page.children == 40 + (80 if join else 0)
    return {f.doc_id: f.reason.split(" is ")[0] for f in page.failures}


def test_a_clean_page_builds_every_document(source: Source) -> None:
    assert failed(source) == {}


def test_infinity_two_relations_deep_fails_only_the_documents_holding_it(source: Source) -> None:
    set_value(source, "UPDATE makers SET score = ? WHERE id = 3", math.inf)  # SQLite stores NaN as NULL
    # maker 3 sits under items 2, 12, 22, ...: shops 2, 12, 22, 32
    assert failed(source) == {f"S|{i}\\": "field 'items.maker.score'" for i in (2, 12, 22, 32)}


def test_text_in_a_real_column_is_checked_by_the_walk(source: Source) -> None:
    set_value(source, "UPDATE items SET price = 'Infinity' WHERE id = 5")
    set_value(source, "UPDATE shops SET rating = '-Infinity' WHERE id = ?", "S|9\\")
    set_value(source, "UPDATE shops SET rating = 'not a number' WHERE id = ?", "S|10\\")
    assert failed(source) == {"S|5\\": "field 'items.price'", "S|9\\": "field 'rating'"}


def test_finite_values_that_overflow_a_sum_still_build(source: Source) -> None:
    set_value(source, "UPDATE items SET price = 1e308 WHERE id IN (1, 2, 3)")
    set_value(source, "UPDATE shops SET rating = -1.7e308 WHERE id IN (?, ?)", "S|1\\", "S|2\\")
    assert failed(source) == {}


def test_an_infinite_join_child_fails_alone(source: Source) -> None:
    set_value(source, "UPDATE staff SET wage = ? WHERE id = 44", -math.inf)
    assert failed(source, join=True) == {"staff:44": "field 'staff.wage'"}
