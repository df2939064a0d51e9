"""`sync` from the MariaDB binlog (mysql-replication, resumed by GTID) into Tantivy on Spark
Structured Streaming: the same changes as on PostgreSQL reach the index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.capture.helpers import Shop, drop_shop, make_shop
from tests.capture.test_postgres_sync import exercise_changes

pytestmark = [pytest.mark.mysql, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_shop("mysql", tmp_path / "shop", services)
    shop.reindex(spark)
    first = shop.sync(spark)  # records the GTID position: changes from now on are captured
    assert (first.applied, first.deleted) == (0, 0)
    yield shop
    drop_shop("mysql", shop, services)


def test_inserts_updates_deletes_and_fan_out_reach_the_index(shop: Shop, spark: Any) -> None:
    exercise_changes(shop, spark)


def test_resumes_by_gtid_without_applying_twice(shop: Shop, spark: Any) -> None:
    shop.sql("UPDATE products SET stock = stock + 1 WHERE id <= 15")
    first = shop.sync(spark)
    assert first.applied == 15 and first.position > 0
    shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 99")
    second = shop.sync(spark)
    assert second.applied == 1 and second.position > first.position
    assert shop.verify().clean
