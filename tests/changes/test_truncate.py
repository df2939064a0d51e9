"""TRUNCATE under a running sync, from PostgreSQL (wal2json's "T" action) and MariaDB (a
statement in the binlog, even in row format): the log names no row, so every document the index
holds is rebuilt by key. A truncated child table empties that part of every document; a
truncated root table deletes every document, except rows written after the truncate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.changes.helpers import HOSTILE, KINDS, Shop, drop_shop, make_shop

pytestmark = pytest.mark.slow


@pytest.fixture(params=KINDS)
def kind_shop(
    request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], spark: Any
) -> Iterator[tuple[str, Shop]]:
    kind = str(request.param)
    shop = make_shop(kind, tmp_path / "shop", services, products=120)
    shop.reindex(spark)
    shop.sync(spark)  # the slot or binlog position: changes from now on are captured
    yield kind, shop
    drop_shop(kind, shop, services)


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
