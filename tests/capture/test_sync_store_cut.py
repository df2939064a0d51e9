"""A sync batch that meets its store out of reach is abandoned, unacknowledged, and never raised
back through Py4J (which printed the Python worker's traceback).

Found by the chaos campaign (the store restarted, then was cut, while a sync
ran). The sink reads the holds before a batch and acknowledges after it, both in the store; an
error there went back through Spark's foreachBatch callback. Now the batch is abandoned, the
query ends, and the next starts from the acknowledged position.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.capture.sync.run import SyncRun
from sparkindex.config import load_pipeline
from sparkindex.errors import SparkIndexError, TransientError
from sparkindex.sources.change_model import STREAM_DDL, Change, end_row
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop
from tests.coordination.proxy import TcpProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop_and_proxy(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[tuple[Shop, TcpProxy]]:
    url = services["postgres"]
    port = sa.make_url(url).port or 5432
    proxy = TcpProxy("127.0.0.1", port)
    proxy.start()
    shop = make_pg_shop(tmp_path / "shop", url, products=40)
    store_url = url.replace(f":{port}/", f":{proxy.port}/")
    text = (shop.directory / "pipeline.yaml").read_text(encoding="utf-8")
    text = text.replace(
        "  url: sqlite:///.sparkindex/state.db", f"  url: {store_url}\n  prefix: cut{uuid.uuid4().hex[:8]}_"
    )
    (shop.directory / "pipeline.yaml").write_text(text, encoding="utf-8")
    shop.pipeline = load_pipeline(shop.directory / "pipeline.yaml")
    shop.reindex(spark)
    try:
        yield shop, proxy
    finally:
        proxy.stop()
        drop_pg_shop(shop, url)


def test_a_batch_meeting_the_store_out_of_reach_is_abandoned_not_raised(
    shop_and_proxy: tuple[Shop, TcpProxy], spark: Any
) -> None:
    shop, proxy = shop_and_proxy
    run = SyncRun(shop.pipeline, until_caught_up=True, spark_factory=lambda: spark)
    feed = run.prepare()
    stream, _gaps, _holds = run._parts(feed)
    try:
        change = Change(table="products", op="update", position=10, old=None, new={"id": 1}, ts=1.0)
        batch = spark.createDataFrame([change.to_row(), end_row({"lsn": 10}, 10, 1.0)], STREAM_DDL)
        proxy.stop()  # the store is cut: the holds cannot be read, nothing can be acknowledged
        stream.sink(spark, shop.pipeline.wire_string(), batch, 0)  # Spark's foreachBatch callback
        failure = run.state.sink_failure
        assert failure is not None and failure.startswith("batch 0 abandoned"), failure
        assert run.totals.batches == 0, "an abandoned batch is never acknowledged"
        assert run.error is None, "a store out of reach is not the end of the sync"
        proxy.start()
    finally:
        feed.close()
    # with the store back, the whole sync catches up and the index equals the source
    shop.sql("UPDATE products SET name = name || ' (renamed)' WHERE id <= 5")
    summary = shop.sync(spark)
    assert summary.applied >= 5
    report = shop.verify()
    assert report.clean, report


def test_a_sync_ending_with_its_store_out_of_reach_says_so_in_one_error(
    shop_and_proxy: tuple[Shop, TcpProxy], spark: Any
) -> None:
    """Found by the chaos campaign (PostgreSQL, the store, restarted
    under a live sync): the store's driver error escaped the run (first from the gap check after
    a failed query, then again from releasing the lock), and the CLI printed its traceback."""
    shop, proxy = shop_and_proxy
    run = SyncRun(shop.pipeline, spark_factory=lambda: spark)  # a live sync, stopped by the test
    outcome: dict[str, BaseException | object] = {}

    def go() -> None:
        try:
            outcome["summary"] = run.run()
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome["error"] = exc

    thread = threading.Thread(target=go, name="sync-under-test", daemon=True)
    thread.start()
    assert run.streaming.wait(300), "the sync never started streaming"
    proxy.stop()  # the store goes away under the running sync
    run.stop_requested.set()  # and the sync is asked to stop (SIGTERM does this)
    thread.join(300)
    assert not thread.is_alive(), "the sync did not end"
    error = outcome.get("error")
    assert error is None or isinstance(error, SparkIndexError), f"{type(error).__name__}: {error}"
    assert not isinstance(error, sa.exc.DBAPIError)


def test_a_live_sync_that_loses_its_store_for_good_fails_it_does_not_end_as_stopped(
    shop_and_proxy: tuple[Shop, TcpProxy], spark: Any
) -> None:
    """Nobody asks this sync to stop: its store goes away and stays away beyond the lock's TTL.
    Ending as a stopped sync does (exit 0) would leave it silently behind; it must fail (exit 3)."""
    shop, proxy = shop_and_proxy
    run = SyncRun(shop.pipeline, spark_factory=lambda: spark)
    outcome: dict[str, BaseException | object] = {}

    def go() -> None:
        try:
            outcome["summary"] = run.run()
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome["error"] = exc

    thread = threading.Thread(target=go, name="sync-under-test", daemon=True)
    thread.start()
    assert run.streaming.wait(300), "the sync never started streaming"
    shop.sql("UPDATE products SET name = name || ' (acknowledged)' WHERE id <= 3")
    acknowledged = threading.Event()
    for _ in range(600):  # a batch acknowledged in this run: the restarts need not read the store
        if run.totals.batches >= 1 or acknowledged.wait(0.5):
            break
    assert run.totals.batches >= 1, "the change was never applied"
    proxy.stop()  # and it stays stopped
    thread.join(600)
    assert not thread.is_alive(), "the sync did not end"
    assert "summary" not in outcome, "a sync that lost its store for good ended as if stopped on purpose"
    error = outcome["error"]
    assert isinstance(error, TransientError), f"{type(error).__name__}: {error}"
    assert error.exit_code == 3
