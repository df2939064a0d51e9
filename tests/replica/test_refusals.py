"""What ``source.read_url`` refuses, on the suite's real servers: a server that does not receive
the primary's changes, a replica that falls behind after P0 (the job leaves nothing behind),
and a sync's gap reconcile meeting a lagging replica (retried, not refused for good).

A position no server has reached yet is forged where a server that is behind and replicates
from nobody is needed: the suite runs one PostgreSQL cluster and one MariaDB topology, so "another
server" is the MariaDB primary read as if it were its replica's replica. Not testable here: a
PostgreSQL server of another cluster (none runs), and PgBouncer as ``read_url`` (it reaches the
primary, which the identifier test below covers directly).

The module pauses the PostgreSQL replica's replay (port 55433) and resumes it however it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.capture.sync.gaps import ReplicaLagging, reconcile
from sparkindex.config.loader import load_pipeline
from sparkindex.coordination.states import JobStatus
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source_url, open_store, open_target
from sparkindex.sources.mysql.replica import MariadbReplicaLink
from sparkindex.sources.postgres.replica import PostgresReplicaLink
from sparkindex.sources.replica import NotThePrimarysReplica, ReplicaBehind, wait_for_replica
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop, wait_until
from tests.replica.helpers import query, replica_url, set_read_url, start_replicas

REPLICA_PORT = 55433
MARIADB_REPLICA_PORT = 53307


class ForgedPostgres(PostgresReplicaLink):
    def primary_position(self) -> str:
        return "FFFFFFFF/0"  # past anything any server has written


class ForgedMariadb(MariadbReplicaLink):
    def primary_position(self) -> str:
        return "0-1-999999999"


def _port(url: str, port: int) -> str:
    """The same server account at *port*, on a database every MariaDB server has."""
    return sa.make_url(url).set(port=port, database="mysql").render_as_string(hide_password=False)


@pytest.mark.postgres
def test_a_server_behind_that_is_the_primary_itself_is_read(services: dict[str, str]) -> None:
    url = services["postgres"]
    with open_source_url(url) as primary, open_source_url(url) as same:
        link = ForgedPostgres(primary, same)
        assert link.is_primary() and link.follows_primary()
        wait_for_replica(link, 0.1, "test")  # not reached, replays nothing, the primary's own: read


@pytest.mark.mysql
def test_a_server_behind_that_replicates_from_nobody_and_is_not_the_primary_is_refused(
    services: dict[str, str],
) -> None:
    start_replicas()
    url = services["mysql"]
    # the "primary" is the replica server; read_url names the real primary: it replicates from
    # nobody, has another server id, and has not reached the (forged) position
    with open_source_url(_port(url, MARIADB_REPLICA_PORT)) as primary, open_source_url(_port(url, 53306)) as other:
        link = ForgedMariadb(primary, other)
        assert not link.is_primary() and not link.status(link.primary_position()).is_replica
        with pytest.raises(NotThePrimarysReplica, match=r"source\.read_url") as refused:
            wait_for_replica(link, 0.1, "test")
    assert refused.value.exit_code == 2


@pytest.mark.mysql
def test_a_replica_of_another_server_is_refused_before_anything_is_read(services: dict[str, str]) -> None:
    start_replicas()
    replica = _port(services["mysql"], MARIADB_REPLICA_PORT)
    # source.url names the replica server; read_url names a server replicating from another (53306)
    with open_source_url(replica) as primary, open_source_url(replica) as reads:
        link = MariadbReplicaLink(primary, reads)
        assert link.follows_primary() is False
        with pytest.raises(NotThePrimarysReplica, match="replicates from another server"):
            wait_for_replica(link, 0.1, "test")


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    start_replicas()
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=20)
    server = sa.make_url(replica_url(shop.url, REPLICA_PORT)).set(database="postgres").render_as_string(False)
    query(server, "SELECT pg_wal_replay_resume()")  # a test that died paused may have left it so
    has = "SELECT count(*) FROM pg_database WHERE datname = :d"
    name = sa.make_url(shop.url).database
    wait_until(lambda: query(server, has, {"d": name})[0][0] == 1, 60, "the replica to have the shop")
    try:
        yield shop
    finally:
        query(server, "SELECT pg_wal_replay_resume()")
        drop_pg_shop(shop, services["postgres"])


def pause(replica: str) -> None:
    """Replay paused, not merely asked to pause (it pauses between records)."""
    query(replica, "SELECT pg_wal_replay_pause()")
    wait_until(lambda: query(replica, "SELECT pg_get_wal_replay_pause_state()")[0][0] == "paused", 30, "replay paused")


class LagsAfterP0(ReindexJob):
    """The replica is current at the first wait and falls behind before the one after P0."""

    calls = 0

    def _wait_for_reads(self) -> None:
        self.calls += 1
        if self.calls == 2:
            replica = self.pipeline.source.read_url
            assert replica is not None
            pause(replica)
            query(self.pipeline.source_url(), "UPDATE products SET name = 'after P0' WHERE id = 1")
        super()._wait_for_reads()


@pytest.mark.postgres
def test_a_reindex_refused_after_p0_leaves_no_slot_no_version_and_a_failed_job(shop: Shop) -> None:
    set_read_url(shop, replica_url(shop.url, REPLICA_PORT), 1)
    pipeline = load_pipeline(shop.directory / "pipeline.yaml")
    job = LagsAfterP0(pipeline, new=True, spark_factory=lambda: None)
    with pytest.raises(ReplicaBehind):
        job.run()
    assert job.calls == 2, "refused by the wait after P0"
    slots = "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE :p"
    assert query(shop.url, slots, {"p": f"{shop.slot}%"})[0][0] == 0, "the job's slot is dropped"
    with open_target(pipeline) as target:
        assert target.list_versions("products") == [], "the job's versions are deleted"
    with open_store(pipeline) as store:
        [record] = store.job_rows.jobs()
        assert record.status == JobStatus.FAILED and record.targets == {}, record


@pytest.mark.postgres
def test_a_sync_gap_reconcile_meeting_a_lagging_replica_is_transient(shop: Shop) -> None:
    replica = replica_url(shop.url, REPLICA_PORT)
    set_read_url(shop, replica, 0.5)
    pipeline = load_pipeline(shop.directory / "pipeline.yaml")
    pause(replica)
    shop.sql("UPDATE products SET name = 'behind' WHERE id = 1")
    with open_store(pipeline) as store, pytest.raises(ReplicaLagging) as lagging:
        reconcile(pipeline, ["products"], lambda: None, store)
    assert lagging.value.exit_code == 3, "the sync retries rather than stopping for good (exit 2)"
