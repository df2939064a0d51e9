"""Several aliases from one stream; consumer groups with their own slots and offsets; the slot's
retained WAL exposed and warned about; `sync --drop-slot`."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.sync.run import SyncRun
from sparkindex.coordination.store import CoordinationStore
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, slot_of

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REVIEWS_INDEX = """\
  - alias: reviews
    table: reviews
    partition_size: 200
    relations:
      - {name: author, type: object, table: users}
"""


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=120)
    text = (shop.directory / "pipeline.yaml").read_text(encoding="utf-8")
    text = text.replace("job:\n", REVIEWS_INDEX + "job:\n", 1)
    (shop.directory / "pipeline.yaml").write_text(text, encoding="utf-8")
    from sparkindex.config import load_pipeline

    shop.pipeline = load_pipeline(shop.directory / "pipeline.yaml")
    shop.reindex(spark)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def _offsets(shop: Shop, group: str) -> dict[str, Any]:
    store = CoordinationStore(shop.pipeline.coordination_url())
    try:
        return store.offsets.offsets(group)
    finally:
        store.close()


def _slots(shop: Shop) -> set[str]:
    return {
        r
        for (r,) in shop.engine()
        .connect()
        .exec_driver_sql(f"SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE '{shop.slot}%%'")
    }


def test_two_aliases_one_stream_and_groups_with_their_own_offsets(
    shop: Shop, spark: Any, cli: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def run(group: str, **kwargs: Any) -> Any:
        return SyncRun(
            shop.pipeline, None, group=group, until_caught_up=True, spark_factory=lambda: spark, **kwargs
        ).run()

    run("default")
    mirror = run("mirror")
    # the aliases were built before group "mirror" existed: a gap, reconciled (nothing to fix)
    assert set(mirror.reconciled) == {"products", "reviews"}
    assert all(n == 0 for found in mirror.reconciled.values() for n in found.values()), mirror.reconciled
    assert _slots(shop) == {slot_of(shop, "default"), slot_of(shop, "mirror")}
    author = shop.scalar("SELECT author_id FROM reviews ORDER BY id LIMIT 1")
    reviews_by_author = shop.scalar(f"SELECT count(*) FROM reviews WHERE author_id = {author}")
    products_by_author = shop.scalar(f"SELECT count(DISTINCT product_id) FROM reviews WHERE author_id = {author}")
    before = int(shop.scalar("SELECT pg_current_wal_lsn() - '0/0'"))  # the update commits after this
    shop.sql(f"UPDATE users SET name = :n WHERE id = {author}", params={"n": HOSTILE[1]})
    shop.pipeline.sync.lag_warn_bytes = 1  # any retained WAL is "too much": the warning must show
    with caplog.at_level(logging.WARNING, logger="sparkindex.capture.sync.run"):
        first = run("default")
    # one stream, both aliases: every product and every review of the author
    assert first.applied == products_by_author + reviews_by_author
    assert first.lag_bytes is not None and first.lag_bytes > 0
    assert any("sync.lag_warn_bytes" in r.getMessage() for r in caplog.records)
    default = _offsets(shop, "default")
    assert set(default) == {"products", "reviews"}
    assert default["products"].applied == products_by_author and default["reviews"].applied == reviews_by_author
    # the other group has not applied it yet, and does so on its own
    assert _offsets(shop, "mirror")["products"].applied == 0
    second = run("mirror")
    assert second.applied == first.applied
    # each group acknowledged past the update's commit (the exact LSN each stops at may differ:
    # the cluster's WAL moves with other databases' writes, the store's own included)
    assert _offsets(shop, "mirror")["products"].position > before
    assert default["products"].position > before
    assert shop.verify().clean
    # --drop-slot removes the group's slot and offsets, and leaves the other group alone
    dropped = subprocess.run(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--group", "mirror", "--drop-slot"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dropped.returncode == 0, dropped.stderr
    assert _slots(shop) == {slot_of(shop, "default")}
    assert _offsets(shop, "mirror") == {} and set(_offsets(shop, "default")) == {"products", "reviews"}
