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
    replica = replica_url(shop.url, REPLICA_PORT)
    query(replica, "SELECT pg_wal_replay_resume()")  # a test that died paused may have left it so
    try:
        yield shop
    finally:
        query(replica, "SELECT pg_wal_replay_resume()")
        drop_pg_shop(shop, services["postgres"])


def _rows_read_on(url: str) -> int:
    [(read,)] = query(
        url,
        "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) "
        "FROM pg_stat_user_tables WHERE relname = 'products'",
    )
    return int(read)


def test_a_rebuild_waits_for_a_lagging_replica_and_a_replica_past_the_bound_is_refused(shop: Shop) -> None:
    replica = replica_url(shop.url, REPLICA_PORT)
    wait_until(
        lambda: (
            query(replica, "SELECT to_regclass('products') IS NOT NULL")[0][0]
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
    process = LoggedProcess([str(CLI), "reindex", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs")
    try:
        wait_for_line(process, "waiting for the replica", 120)
        assert "replay paused" in process.stderr_text()
        expected = write_during_rebuild(shop)
        query(replica, "SELECT pg_wal_replay_resume()")
        assert process.wait(timeout=240) == 0, process.stderr_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "replayed position" in process.stderr_text()
    # the partitions read the replica: every row of the table, at least
    assert _rows_read_on(replica) - before >= PRODUCTS
    # change capture is the primary's: the pipeline's slots are there, a standby has none
    slot = f"{shop.slot}%"
    assert query(shop.url, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE :p", {"p": slot})[0][0] > 0
    assert query(replica, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE :p", {"p": slot})[0][0] == 0
    assert alias_target(shop) is not None
    assert_written(shop, expected)  # the catch-up applied what was written during the rebuild
    assert_verify_clean(shop)
