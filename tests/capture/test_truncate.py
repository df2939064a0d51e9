"""TRUNCATE under a running sync, from PostgreSQL (wal2json's "T" action) and MariaDB (a
statement in the binlog, even in row format): the log names no row, so every document the index
holds is rebuilt by key. A truncated child table empties that part of every document; a
truncated root table deletes every document, except rows written after the truncate."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.ranges import spread_truncates
from sparkindex.capture.stream import ChangeStreamReader
from sparkindex.sources.change_model import Change
from tests.capture.helpers import HOSTILE, KINDS, Shop, drop_shop, make_shop

pytestmark = pytest.mark.slow


@pytest.fixture(params=KINDS)
def kind_shop(
    request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], spark: Any
) -> Iterator[tuple[str, Shop]]:
    kind = str(request.param)
    # four ranges of about 30 documents: the rebuild runs as several Spark tasks
    shop = make_shop(kind, tmp_path / "shop", services, products=120, extra="  truncate_range_docs: 30\n")
    shop.reindex(spark)
    shop.sync(spark)  # the slot or binlog position: changes from now on are captured
    yield kind, shop
    drop_shop(kind, shop, services)


def test_a_truncate_is_spread_over_sort_key_ranges_that_tile_the_index(kind_shop: tuple[str, Shop]) -> None:
    _, shop = kind_shop
    spread = spread_truncates(shop.pipeline, [Change("reviews", "truncate", 7), Change("products", "update", 8)])
    assert spread[0] == Change("products", "update", 8)
    ranges = [c.old or {} for c in spread[1:]]
    assert all(c.op == "truncate" and c.table == "reviews" and c.position == 7 for c in spread[1:])
    assert {r["alias"] for r in ranges} == {"products"}
    assert len(ranges) >= 3, ranges
    edges = [(r["lo"], r["hi"]) for r in ranges]
    assert edges[0][0] is None and edges[-1][1] is None
    assert all(a[1] == b[0] for a, b in itertools.pairwise(edges)), "contiguous"
    reader = ChangeStreamReader("", {"tables": [{"name": "reviews", "link_columns": ["product_id"]}]}, {})
    assert len(reader._by_row(spread)) == 1 + len(ranges), "each range a task of its own"


def _no_foreign_keys(kind: str) -> tuple[str, ...]:
    """MariaDB refuses to truncate a table another table's foreign key refers to."""
    return ("SET FOREIGN_KEY_CHECKS = 0",) if kind == "mysql" else ()


def test_a_truncated_child_table_leaves_every_document_without_its_rows(
    kind_shop: tuple[str, Shop], spark: Any
) -> None:
    kind, shop = kind_shop
    reviewed = shop.scalar("SELECT count(DISTINCT product_id) FROM reviews")
    assert reviewed > 10 and shop.document("5")["reviews"]  # type: ignore[index]
    shop.sql(*_no_foreign_keys(kind), "TRUNCATE TABLE reviews")
    summary = shop.sync(spark)
    assert summary.applied >= reviewed and summary.deleted == 0
    assert not shop.document("5").get("reviews")  # type: ignore[union-attr]
    report = shop.verify()
    assert report.clean, report.to_dict()


def test_a_truncated_root_table_deletes_every_document_but_rows_written_after(
    kind_shop: tuple[str, Shop], spark: Any
) -> None:
    kind, shop = kind_shop
    products = shop.scalar("SELECT count(*) FROM products")
    truncate = (
        ("TRUNCATE TABLE reviews", "TRUNCATE TABLE products")
        if kind == "mysql"
        else ("TRUNCATE TABLE reviews, products",)
    )
    shop.sql(
        *_no_foreign_keys(kind),
        *truncate,
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
        "VALUES (100001, :n, :d, 1.5, 3, 1, '2026-01-01 00:00:00')",
        params={"n": HOSTILE[0], "d": HOSTILE[1]},
    )
    summary = shop.sync(spark)
    assert summary.deleted == products
    assert shop.document("100001")["name"] == HOSTILE[0]  # type: ignore[index]
    assert shop.document("5") is None
    report = shop.verify()
    assert report.clean, report.to_dict()
