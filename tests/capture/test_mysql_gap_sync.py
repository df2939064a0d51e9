"""No silent gap, end to end on MariaDB: binlogs purged past a sync's stored GTID are never passed
over as a quiet database. ``sync.on_gap: reconcile`` (the default) verifies and repairs the index
on Spark and streams on from the position of then; ``on_gap: fail`` refuses, naming the GTID
(exit 3 from the CLI), and applies nothing.

Like ``test_mysql_gap.py``, these tests purge binlogs, so they run on a private MariaDB server
(started once for this module), never on the shared one: other syncs reading it (other tests of
this run are serial and keep no offsets across tests, but other people run the suite against the
same server at the same time) would find their GTIDs purged under them.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.sync.run import SyncSummary
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import generate_shop
from sparkindex.errors import LogGap
from tests.capture.helpers import Shop, write_pipeline
from tests.capture.test_mysql_restarts import PrivateMariaDB
from tests.e2e.shop import copy_shop, fresh_database

RUNNER_HEALS_GAPS = "reconciled" in SyncSummary.__dataclass_fields__

pytestmark = [
    pytest.mark.mysql,
    pytest.mark.slow,
    pytest.mark.skipif(
        not RUNNER_HEALS_GAPS,
        reason="needs the runner's gap handling (SyncRun asks ChangeSource.continuity on start, sync.on_gap, "
        "SyncSummary.reconciled), which has not landed yet",
    ),
]


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateMariaDB]:
    my = PrivateMariaDB()
    yield my
    my.destroy()


@pytest.fixture
def make(tmp_path: Path, server: PrivateMariaDB, spark: Any) -> Callable[[str], Shop]:
    """A shop on the private server with *extra* in its ``sync:`` section, indexed, with one
    change synced (so the stored offset is a GTID the binlog wrote)."""

    def build(extra: str = "") -> Shop:
        directory = tmp_path / f"shop_{uuid.uuid4().hex[:6]}"
        directory.mkdir()
        generate_shop(directory / "shop.db", 60)
        url = fresh_database(server.url, f"gaps_{uuid.uuid4().hex[:8]}")
        copy_shop(directory / "shop.db", normalize_url(url))
        shop = Shop(directory, url, write_pipeline(directory, url, "unused", extra), "unused")
        shop.reindex(spark)
        shop.sync(spark)  # the group's offset: the head of the binlog
        shop.sql("UPDATE products SET name = 'synced' WHERE id = 1")
        assert shop.sync(spark).applied == 1
        return shop

    return build


def stored_gtid(shop: Shop) -> str:
    p = shop.pipeline
    store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
    try:
        return str(store.offsets.offsets(p.sync.group)["products"].offset["gtid"])
    finally:
        store.engine.dispose()


def changes_then_purge(shop: Shop, server: PrivateMariaDB) -> None:
    """Changes nobody synced (5 updated, 1 inserted, 1 deleted), a new binlog file, one more
    update in it, and every older file purged: the stored GTID's file with them."""
    shop.sql(
        "UPDATE products SET stock = stock + 100 WHERE id BETWEEN 2 AND 6",
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
        "VALUES (100001, 'new', 'inserted while nobody synced', 1.5, 3, 1, '2026-01-01 00:00:00')",
        "DELETE FROM reviews WHERE product_id = 7",
        "DELETE FROM products WHERE id = 7",
    )
    server.admin("FLUSH BINARY LOGS")
    shop.sql("UPDATE products SET stock = stock + 100 WHERE id = 10")
    newest = str(server.admin("SHOW BINARY LOGS")[-1][0])
    server.purge_binlogs_to(newest)
    assert [str(r[0]) for r in server.admin("SHOW BINARY LOGS")] == [newest]


def test_purged_binlogs_are_reconciled_and_the_stream_goes_on(
    make: Callable[[str], Shop], server: PrivateMariaDB, spark: Any
) -> None:
    shop = make("")
    changes_then_purge(shop, server)
    summary = shop.sync(spark)
    assert summary.reconciled == {"products": {"missing": 1, "stale": 6, "extra": 1, "duplicates": 0}}
    report = shop.verify()
    assert report.clean, report.to_dict()
    assert shop.document("7") is None and shop.document("100001") is not None
    # the stream goes on from the position the repair started at: no gap any more
    shop.sql("UPDATE products SET name = 'after' WHERE id = 11")
    after = shop.sync(spark)
    assert after.applied == 1 and not after.reconciled
    assert shop.verify().clean


def test_on_gap_fail_refuses_naming_the_gtid_and_applies_nothing(
    make: Callable[[str], Shop], server: PrivateMariaDB, spark: Any, cli: Path
) -> None:
    shop = make("  on_gap: fail\n")
    changes_then_purge(shop, server)
    gtid = stored_gtid(shop)
    with pytest.raises(LogGap) as raised:
        shop.sync(spark)
    assert gtid in str(raised.value) and "purged" in str(raised.value)
    done = subprocess.run(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--until-caught-up"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert gtid in done.stderr
    assert stored_gtid(shop) == gtid, "a refused sync stores nothing"
    assert not shop.verify().clean, "and applies nothing"
