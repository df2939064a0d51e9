"""A full reindex and verify read a MariaDB replica (``source.read_url``): the reindex waits
until the replica has applied the primary's GTID position, reads its rows there, catches up from
the primary's binlog, and verify is clean; a replica behind for longer than
``source.max_replica_lag_s`` is refused (exit 2) before anything is built.

The module owns the replica of ``scripts/test-replicas.sh`` (port 53307, applying databases named
``si_replica*`` only) while it runs: it stops the SQL thread, and starts it however the test ends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import generate_shop
from tests.capture.helpers import Shop, wait_until, write_pipeline
from tests.cli_process import LoggedProcess
from tests.e2e.shop import copy_shop, drop_database, fresh_database
from tests.replica.helpers import (
    CLI,
    alias_target,
    assert_verify_clean,
    assert_written,
    cli,
    query,
    replica_url,
    set_read_url,
    start_replicas,
    wait_for_line,
    write_during_rebuild,
)

pytestmark = [pytest.mark.mysql, pytest.mark.slow]
REPLICA_PORT = 53307
PRODUCTS = 300


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    start_replicas()
    # the replica has no database "sparkindex" (it applies si_replica* only)
    replica_admin = sa.make_url(services["mysql"]).set(port=REPLICA_PORT, database="mysql").render_as_string(False)
    query(replica_admin, "START SLAVE SQL_THREAD")  # a test that died paused may have left it so
    directory = tmp_path / "shop"
    directory.mkdir()
    generate_shop(directory / "shop.db", PRODUCTS)
    name = f"si_replica_{uuid.uuid4().hex[:10]}"  # the replica applies these databases only
    url = fresh_database(services["mysql"], name)
    try:
        copy_shop(directory / "shop.db", normalize_url(url))
        slot = f"t{uuid.uuid4().hex[:8]}"
        yield Shop(directory, url, write_pipeline(directory, url, slot), slot)
    finally:
        query(replica_admin, "START SLAVE SQL_THREAD")
        drop_database(services["mysql"], name)


def _rows_read_on(url: str) -> int:
    database = sa.make_url(url).database
    rows = query(
        url,
        "SELECT coalesce(sum(ROWS_READ), 0) FROM information_schema.TABLE_STATISTICS "
        "WHERE TABLE_SCHEMA = :db AND TABLE_NAME = 'products'",
        {"db": database},
    )
    return int(rows[0][0])


def test_a_rebuild_waits_for_a_lagging_replica_and_a_replica_past_the_bound_is_refused(shop: Shop) -> None:
    replica = replica_url(shop.url, REPLICA_PORT)
    database = sa.make_url(shop.url).database
    wait_until(
        lambda: (
            query(
                replica,
                "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = :db AND TABLE_NAME = 'reviews'",
                {"db": database},
            )[0][0]
            == 1
            and query(replica, "SELECT count(*) FROM products")[0][0] == PRODUCTS
        ),
        60,
        "the replica to have the shop",
    )
    query(replica, "STOP SLAVE SQL_THREAD")
    shop.sql("UPDATE products SET name = 'before the rebuild' WHERE id = 1")  # the replica is behind

    # 1. past the bound: refused naming the key, the bound and how far behind; nothing built
    set_read_url(shop, replica, 2)
    refused = cli(shop, "reindex")
    assert refused.returncode == 2, refused.stderr[-3000:]
    said = refused.stderr
    assert "source.read_url" in said and "max_replica_lag_s = 2s" in said, said[-3000:]
    assert "transactions behind" in said and "SQL No" in said, said[-3000:]
    assert alias_target(shop) is None, "no version was swapped in"
    assert not list((shop.directory / "index").glob("products_v*")), "no version was created"

    # 2. within the bound: the reindex waits, saying so; writes meanwhile; the SQL thread starts
    set_read_url(shop, replica, 120)
    before = _rows_read_on(replica)
    process = LoggedProcess([str(CLI), "reindex", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs")
    try:
        wait_for_line(process, "waiting for the replica", 120)
        expected = write_during_rebuild(shop)
        query(replica, "START SLAVE SQL_THREAD")
        assert process.wait(timeout=240) == 0, process.stderr_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "replayed position" in process.stderr_text()
    assert _rows_read_on(replica) - before >= PRODUCTS  # the partitions read the replica
    # change capture is the primary's: the replica writes no binlog a reader could follow
    assert query(replica, "SELECT @@log_bin")[0][0] == 0
    assert alias_target(shop) is not None
    assert_written(shop, expected)  # the catch-up applied what was written during the rebuild
    assert_verify_clean(shop)
