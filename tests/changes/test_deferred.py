"""Deferred relations: a category rename is recorded, not applied, until the deferred refresh
runs (`sync --apply-deferred`, a partitioned Spark job); then every affected product changes.
Later changes to the same row replace the earlier record."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.config import load_pipeline
from sparkindex.coordination.offsets import OffsetStore
from sparkindex.coordination.store import CoordinationStore
from tests.changes.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=150)
    path = shop.directory / "pipeline.yaml"
    relation = "        type: object\n        table: categories\n"
    text = path.read_text(encoding="utf-8").replace(relation, relation + "        deferred: true\n", 1)
    path.write_text(text, encoding="utf-8")
    shop.pipeline = load_pipeline(path)
    shop.reindex(spark)
    shop.sync(spark)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def _records(shop: Shop) -> list[Any]:
    store = CoordinationStore(shop.pipeline.coordination_url())
    try:
        return OffsetStore(store.engine).deferred("products")
    finally:
        store.close()


def test_category_rename_waits_for_the_deferred_refresh(shop: Shop, spark: Any, cli: Path) -> None:
    category = shop.scalar("SELECT category_id FROM products WHERE id = 10")
    products = shop.scalar(f"SELECT count(*) FROM products WHERE category_id = {category}")
    old_name = shop.scalar(f"SELECT name FROM categories WHERE id = {category}")
    shop.sql(f"UPDATE categories SET name = 'first' WHERE id = {category}")
    shop.sql(f"UPDATE categories SET name = :n WHERE id = {category}", params={"n": HOSTILE[0]})
    shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 11")  # not deferred: applied at once
    summary = shop.sync(spark)
    assert summary.applied == 1
    [record] = _records(shop)  # two renames of one row: one record, the later position
    assert record.table == "categories" and record.row_key == f"[{category}]"
    assert shop.document("10")["category"]["name"] == old_name  # type: ignore[index]
    done = subprocess.run(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--apply-deferred", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert result["records"] == 1 and result["applied"] == products
    assert _records(shop) == []
    assert shop.document("10")["category"]["name"] == HOSTILE[0]  # type: ignore[index]
    assert shop.verify().clean
