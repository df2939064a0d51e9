"""A pipeline without a ``sync:`` section, on a source that can capture changes: the reindex
records the log position before it plans (the head; nothing kept on the server) and hands it
to the live group, so the first sync continues from there (MariaDB: by GTID) or finds the gap
and reconciles it (PostgreSQL: no slot kept the WAL). Measured before this: 8,335 stale
documents after the reindex, 89,979 after a sync that exited 0."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from sparkindex.targets.registry import open_target
from tests.capture.helpers import HOSTILE, KINDS, Shop, drop_shop, wait_until
from tests.capture.test_changes_during_rebuild import Writer
from tests.e2e.shop import copy_shop, fresh_database

pytestmark = pytest.mark.slow

PRODUCTS = 2000


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], kind: str) -> Iterator[Shop]:
    directory = tmp_path / "shop"
    directory.mkdir(parents=True)
    generate_shop(directory / "shop.db", PRODUCTS)
    name = f"chg_{uuid.uuid4().hex[:10]}"
    url = fresh_database(services[kind], name)
    copy_shop(directory / "shop.db", normalize_url(url))
    text = PIPELINE_YAML.format(partition_size=100).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("url: sqlite:///shop.db", f"url: {url}")
    assert "sync:" not in text
    (directory / "pipeline.yaml").write_text(text, encoding="utf-8")
    # slots, if any, carry the default prefix and the database's name (dropped with the shop)
    shop = Shop(directory, url, load_pipeline(directory / "pipeline.yaml"), f"sparkindex_{name}")
    if kind == "postgres":
        shop.sql("ALTER TABLE reviews REPLICA IDENTITY FULL")
    yield shop
    drop_shop(kind, shop, services)


def _slots(shop: Shop) -> list[str]:
    database = sa.make_url(shop.url).database
    query = "SELECT slot_name FROM pg_replication_slots WHERE database = :d"
    with shop.engine().connect() as conn:
        return [r for (r,) in conn.execute(sa.text(query), {"d": database})]


def _offsets(shop: Shop) -> dict[str, Any]:
    store = CoordinationStore(shop.pipeline.coordination_url())
    try:
        return store.offsets.offsets(shop.pipeline.sync.group)
    finally:
        store.close()


def _alias(shop: Shop) -> str | None:
    target = open_target(shop.pipeline.target.url, shop.pipeline.base_dir, shop.pipeline.target.options)
    try:
        return target.alias_target("products")
    finally:
        target.close()


def _reindex_under_writes(shop: Shop, spark: Any, kind: str, first_id: int) -> None:
    writer = Writer(shop, PRODUCTS, kind)
    writer.next_id = first_id  # new products' ids: each writer its own
    with shop.engine().connect() as conn:
        writer.existing = [int(r) for (r,) in conn.execute(sa.text("SELECT id FROM products ORDER BY id"))]
    writer.start()
    try:
        wait_until(lambda: writer.error is None and len(writer.log) > 20, 120, "the writer to commit")
        started = len(writer.log)
        shop.reindex(spark)
    finally:
        writer.stop.set()
        writer.join(timeout=60)
    assert writer.error is None
    assert len(writer.log) - started > 100, "the writer must have committed throughout the reindex"


def test_the_first_sync_after_a_reindex_without_a_sync_section_leaves_nothing_behind(
    shop: Shop, spark: Any, kind: str
) -> None:
    _reindex_under_writes(shop, spark, kind, 1_000_000)
    if kind == "postgres":
        assert _slots(shop) == [], "a reindex of a pipeline nobody syncs keeps nothing on the server"
    assert _offsets(shop)["products"].index == _alias(shop), "the live group is handed the new version"
    # more writes after the reindex, then the first sync
    shop.sql("UPDATE products SET name = :n WHERE id = 5", params={"n": HOSTILE[4]})
    shop.sql("DELETE FROM reviews WHERE product_id = 6", "DELETE FROM products WHERE id = 6")
    summary = shop.sync(spark)
    if kind == "postgres":
        assert "products" in summary.reconciled, "no slot kept the WAL: the gap is found and reconciled"
    else:
        assert summary.reconciled == {}, "the binlog serves the recorded GTID: nothing to reconcile"
    report = shop.verify()
    assert report.clean and report.duplicates == 0, report.to_dict()
    assert (shop.document("5") or {}).get("name") == HOSTILE[4] and shop.document("6") is None

    # the alias is synced now: the next reindex catches up, and the sync after it has no gap
    _reindex_under_writes(shop, spark, kind, 2_000_000)
    assert shop.sync(spark).reconciled == {}
    report = shop.verify()
    assert report.clean and report.duplicates == 0, report.to_dict()
