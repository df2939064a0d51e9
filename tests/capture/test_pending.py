"""``--until-caught-up`` asks the source whether anything is left to apply. A log holds
transactions that touch no watched table (an autovacuum's statistics, DDL, other tables'
writes): one of those ahead of a real change must not make the source look caught up.

CI once saw exactly this: a sync stopped with 0 of 20 updates applied, because its first batch
was slow to start and the probe read one transaction (an unrelated one) and found nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.sync.run import SyncRun
from sparkindex.sources.change_source import ChangeSource
from tests.capture.helpers import KINDS, Shop, drop_shop, make_shop


@pytest.fixture(params=KINDS)
def prepared(request: Any, tmp_path: Path, services: dict[str, str]) -> Iterator[tuple[Shop, ChangeSource]]:
    shop = make_shop(request.param, tmp_path / "shop", services, products=20)
    feed = SyncRun(shop.pipeline, None, until_caught_up=True).prepare()
    try:
        yield shop, feed.changes
    finally:
        feed.changes.drop()
        feed.close()
        drop_shop(request.param, shop, services)


def test_a_change_behind_unrelated_transactions_is_still_pending(prepared: tuple[Shop, ChangeSource]) -> None:
    shop, changes = prepared
    start = changes.start()
    shop.sql("CREATE TABLE unrelated (x INT)")
    for i in range(5):
        shop.sql(f"INSERT INTO unrelated VALUES ({i})")
    assert not changes.pending(start, changes.head()), "only unrelated transactions so far"
    shop.sql("UPDATE products SET stock = stock + 1 WHERE id <= 3")
    head = changes.head()
    assert changes.pending(start, head)
    # and once everything up to the head is read, nothing is
    batch = changes.read(start, 1000, head)
    assert {c.table for c in batch.changes} == {"products"} and len(batch.changes) == 3
    assert not changes.pending(batch.offset, head)
