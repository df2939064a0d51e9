"""A full reindex and verify read a PostgreSQL streaming replica (``source.read_url``): the
reindex waits until the replica has replayed the primary's position, reads its rows there,
catches up from the primary's slot, and verify is clean; a replica behind for longer than
``source.max_replica_lag_s`` is refused (exit 2) before anything is built.

The module owns the replica of ``scripts/test-replicas.sh`` (port 55433) while it runs: it pauses
replay, and resumes it however the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.resources import open_store
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop, wait_until
from tests.cli_process import LoggedProcess
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

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
REPLICA_PORT = 55433
PRODUCTS = 300


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    start_replicas()
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=PRODUCTS)
    # the server's own database: the shop's may not have reached the replica yet
    server = sa.make_url(replica_url(shop.url, REPLICA_PORT)).set(database="postgres").render_as_string(False)
    query(server, "SELECT pg_wal_replay_resume()")  # a test that died paused may have left it so
    try:
        yield shop
    finally:
        query(server, "SELECT pg_wal_replay_resume()")
        drop_pg_shop(shop, services["postgres"])


def _rows_read_on(url: str) -> int:
    [(read,)] = query(
        url,
        "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) "
        "FROM pg_stat_user_tables WHERE relname = 'products'",
    )
    return int(read)


def _p0_recorded(shop: Shop) -> bool:
    """The reindex's catch-up group has its start position in the store: P0 is recorded."""
    with open_store(shop.pipeline) as store:
        return any(o.group.startswith("reindex:") for o in store.offsets.every_group())


def _write_after_p0(shop: Shop) -> dict[str, str | None]:
    """An update and an insert after P0, with hostile text; what the index must hold after."""
    shop.sql("UPDATE products SET name = :n WHERE id = 4", params={"n": 'after P0; Zoë, "quoted" | again'})
    shop.sql(
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
        "VALUES (900002, 'after P0, inserted', 'new', 3.5, 1, 1, '2026-02-03 00:00:00')"
    )
    return {"4": 'after P0; Zoë, "quoted" | again', "900002": "after P0, inserted"}


def test_a_rebuild_waits_for_a_lagging_replica_and_a_replica_past_the_bound_is_refused(shop: Shop) -> None:
    replica = replica_url(shop.url, REPLICA_PORT)
    server = sa.make_url(replica).set(database="postgres").render_as_string(False)
    name = sa.make_url(shop.url).database
    wait_until(
        lambda: (
            query(server, "SELECT count(*) FROM pg_database WHERE datname = :d", {"d": name})[0][0] == 1
            and query(replica, "SELECT to_regclass('products') IS NOT NULL")[0][0]
            and query(replica, "SELECT count(*) FROM products")[0][0] == PRODUCTS
        ),
        60,
        "the replica to have the shop",
    )
    query(replica, "SELECT pg_wal_replay_pause()")  # asked; replay pauses between records
    wait_until(lambda: query(replica, "SELECT pg_get_wal_replay_pause_state()")[0][0] == "paused", 30, "paused")
    shop.sql("UPDATE products SET name = 'before the rebuild' WHERE id = 1")  # the replica is behind

    # 1. past the bound: refused naming the key, the bound and how far behind; nothing built
    set_read_url(shop, replica, 2)
    checked = cli(shop, "check")  # check says it is a replica of the primary, and how far behind
    assert "source.read_url" in checked.stdout and "is a replica" in checked.stdout, checked.stdout
    assert "source.replica_lag" in checked.stdout and "replay paused" in checked.stdout, checked.stdout
    refused = cli(shop, "reindex")
    assert refused.returncode == 2, refused.stderr[-3000:]
    said = refused.stderr
    assert "source.read_url" in said and "max_replica_lag_s = 2s" in said, said[-3000:]
    assert "bytes of WAL behind" in said and "replay paused" in said, said[-3000:]
    assert alias_target(shop) is None, "no version was swapped in"
    assert not list((shop.directory / "index").glob("products_v*")), "no version was created"

    # 2. within the bound: the reindex waits, saying so; writes meanwhile; replay resumes
    set_read_url(shop, replica, 120)
    before = _rows_read_on(replica)
    primary_before = _rows_read_on(shop.url)
    process = LoggedProcess([str(CLI), "reindex", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs")
    try:
        wait_for_line(process, "waiting for the replica", 120)
        assert "replay paused" in process.stderr_text()
        expected = write_during_rebuild(shop)
        query(replica, "SELECT pg_wal_replay_resume()")
        # 3. once the catch-up position P0 is recorded, the replica falls behind again, and more
        # is written: only the catch-up, which reads the primary's log and rows, can bring it in
        waits = process.stderr_text().count("waiting for the replica")  # the first wait's
        wait_until(lambda: process.assert_running("the reindex") and _p0_recorded(shop), 120, "P0 recorded")
        query(replica, "SELECT pg_wal_replay_pause()")
        expected |= _write_after_p0(shop)

        def resumed_when_waited_on() -> bool:  # the reindex may wait for it again, or go on
            if process.stderr_text().count("waiting for the replica") > waits:
                query(replica, "SELECT pg_wal_replay_resume()")
            return process.poll() is not None

        wait_until(resumed_when_waited_on, 240, "the reindex to end")
        assert process.wait(timeout=10) == 0, process.stderr_text()[-3000:]
    finally:
        query(replica, "SELECT pg_wal_replay_resume()")
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "replayed position" in process.stderr_text()
    # the primary was not where the rows were read: less than one full read of the table there
    assert _rows_read_on(shop.url) - primary_before < PRODUCTS
    # the partitions read the replica: every row of the table, at least
    assert _rows_read_on(replica) - before >= PRODUCTS
    # change capture is the primary's: the pipeline's slots are there, a standby has none
    slot = f"{shop.slot}%"
    assert query(shop.url, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE :p", {"p": slot})[0][0] > 0
    assert query(replica, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE :p", {"p": slot})[0][0] == 0
    assert alias_target(shop) is not None
    assert_written(shop, expected)  # the catch-up applied what was written during the rebuild
    assert_verify_clean(shop)
