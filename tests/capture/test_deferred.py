"""Deferred relations: a category rename is recorded, not applied, until the deferred refresh
runs (`sync --apply-deferred`, or a live sync at `sync.deferred_at`, once a day across restarts: a
partitioned Spark job); then every affected product changes. Later changes to the same row
replace the earlier record."""

from __future__ import annotations

import datetime as dt
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.capture.sync.deferred import due
from sparkindex.capture.sync.run import SyncRun
from sparkindex.config import load_pipeline
from sparkindex.coordination.store import CoordinationStore
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, wait_until

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
        return store.deferred_changes.deferred("products")
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


def _live_sync(shop: Shop, spark: Any) -> tuple[SyncRun, threading.Thread]:
    run = SyncRun(shop.pipeline, None, spark_factory=lambda: spark)
    thread = threading.Thread(target=run.run, name="live-sync", daemon=True)
    thread.start()
    return run, thread


def _stop(run: SyncRun, thread: threading.Thread) -> None:
    run.stop_requested.set()
    thread.join(120)
    assert not thread.is_alive() and run.error is None


def test_the_scheduled_refresh_runs_once_a_day_across_restarts(shop: Shop, spark: Any) -> None:
    """``sync.deferred_at``: a live sync applies the deferred changes once the time of day has
    come, and records the day in the coordination store; a sync restarted later that day leaves
    new records for tomorrow's refresh."""
    category = shop.scalar("SELECT category_id FROM products WHERE id = 10")
    shop.sql(f"UPDATE categories SET name = :n WHERE id = {category}", params={"n": HOSTILE[1]})
    shop.sync(spark)  # no deferred_at yet: the change is recorded
    assert len(_records(shop)) == 1
    path = shop.directory / "pipeline.yaml"
    path.write_text(path.read_text(encoding="utf-8") + '  deferred_at: "00:00"\n', encoding="utf-8")
    shop.pipeline = load_pipeline(path)
    run, thread = _live_sync(shop, spark)
    try:
        wait_until(lambda: not _records(shop), 300, "the scheduled refresh to apply the deferred change")
    finally:
        _stop(run, thread)
    assert shop.document("10")["category"]["name"] == HOSTILE[1]  # type: ignore[index]
    last = _last_run(shop)
    assert last is not None and dt.date.fromtimestamp(last) == dt.date.today()

    shop.sql(f"UPDATE categories SET name = :n WHERE id = {category}", params={"n": HOSTILE[2]})
    shop.sync(spark)  # the day's refresh is done: recorded for tomorrow's
    run, thread = _live_sync(shop, spark)  # and a live sync restarted later the same day
    try:
        wait_until(lambda: run._deferred_tried == dt.date.today(), 300, "the restarted sync to consider the refresh")
    finally:
        _stop(run, thread)
    assert len(_records(shop)) == 1, "applied once a day: the new record waits for tomorrow"
    assert shop.document("10")["category"]["name"] == HOSTILE[1]  # type: ignore[index]


def _last_run(shop: Shop) -> float | None:
    store = CoordinationStore(shop.pipeline.coordination_url())
    try:
        return store.deferred_runs.last_deferred_run(["products"])
    finally:
        store.close()


@pytest.mark.parametrize(
    ("now", "last", "expected"),
    [
        ("2026-05-01 01:59", None, False),  # not the time yet
        ("2026-05-01 02:00", None, True),
        ("2026-05-01 09:00", "2026-04-30 02:00", True),  # yesterday's
        ("2026-05-01 09:00", "2026-05-01 02:00", False),  # today's, done
        ("2026-05-01 09:00", "2026-05-01 01:00", True),  # run by hand before today's time
        ("2026-05-02 00:30", "2026-05-01 02:00", False),  # after midnight, before the time
    ],
)
def test_when_the_daily_refresh_is_due(now: str, last: str | None, expected: bool) -> None:
    last_started = None if last is None else dt.datetime.fromisoformat(last).timestamp()
    assert due("02:00", last_started, dt.datetime.fromisoformat(now)) is expected
