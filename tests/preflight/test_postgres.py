"""PostgreSQL change capture prerequisites, each failure made real and its fix applied:

* a private PostgreSQL 15 started with ``wal_level = replica`` (the fix: ALTER SYSTEM and a restart);
* the wal2json plugin out of the server's reach (``dynamic_library_path`` pointing elsewhere);
* a role without REPLICATION on the shared server (the fix: ALTER ROLE ... WITH REPLICATION);
* a table whose deletes do not log the key that finds their document (REPLICA IDENTITY FULL).

The private server is this module's own (chaos.servers.PgServer, started with the setting a server
without change capture has); the shared one's settings are never changed.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from chaos.servers import PgServer

from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import generate_shop
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop, wait_until, write_pipeline
from tests.e2e.shop import copy_shop
from tests.preflight.helpers import checks_of, free_port, sql_of

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


class ReplicaPgServer(PgServer):
    """A private PostgreSQL as one set up without change capture runs: ``wal_level = replica``
    (the last line of postgresql.conf wins over the logical level PgServer writes)."""

    def _initdb(self) -> None:
        super()._initdb()
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("wal_level = replica\n")


@pytest.fixture(scope="module")
def server() -> Iterator[ReplicaPgServer]:
    workdir = Path(tempfile.mkdtemp(prefix="sparkindex-preflight-pg-"))
    pg = ReplicaPgServer(workdir, free_port()).start()
    yield pg
    pg.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def private_pipeline(server: ReplicaPgServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shop in the private server, with a ``sync:`` section (change capture is asked for)."""
    directory = tmp_path_factory.mktemp("private-shop")
    generate_shop(directory / "shop.db", 20)
    server.create_database("shop")
    copy_shop(directory / "shop.db", normalize_url(server.url("shop")))
    with server.connect("shop") as conn:
        conn.execute("ALTER TABLE reviews REPLICA IDENTITY FULL")
    write_pipeline(directory, server.url("shop"), f"t{uuid.uuid4().hex[:8]}")
    return directory / "pipeline.yaml"


def _set_system(server: ReplicaPgServer, statement: str) -> None:
    with server.connect() as conn:
        conn.execute(statement)


def _logical(server: ReplicaPgServer) -> None:
    """The fix the wal_level check names: ALTER SYSTEM, then a restart."""
    _set_system(server, "ALTER SYSTEM SET wal_level = logical")
    server.stop()
    server.start()


def test_wal_level_replica_then_logical(server: ReplicaPgServer, private_pipeline: Path) -> None:
    with server.connect() as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("replica",)
    checks = checks_of(private_pipeline)
    level = checks["postgres.wal_level"]
    assert level.status == "FAIL" and "wal_level = 'replica'" in level.detail, level
    assert checks["postgres.wal2json"].status == "OK", "a superuser can load the plugin before logical decoding"
    assert "loads" in checks["postgres.wal2json"].detail

    assert sql_of(level.fix) == "ALTER SYSTEM SET wal_level = logical"
    _logical(server)
    checks = checks_of(private_pipeline)
    assert checks["postgres.wal_level"].status == "OK"
    assert checks["postgres.wal2json"].status == "OK" and "temporary slot" in checks["postgres.wal2json"].detail
    assert {c.status for c in checks.values()} == {"OK"}, [c.line() for c in checks.values() if c.status != "OK"]
    with server.connect("shop") as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,), "the probe's slot is gone"


def test_wal2json_out_of_reach_then_back(server: ReplicaPgServer, private_pipeline: Path, tmp_path: Path) -> None:
    """The plugin is found through ``dynamic_library_path``: pointed at an empty directory, the
    server lacks wal2json exactly as one without the package does."""
    with server.connect() as conn:
        if conn.execute("SHOW wal_level").fetchone() != ("logical",):
            _logical(server)
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    _reload(server, f"ALTER SYSTEM SET dynamic_library_path = '{empty}'", str(empty))
    try:
        plugin = checks_of(private_pipeline)["postgres.wal2json"]
        assert plugin.status == "FAIL" and "lacks the wal2json output plugin" in plugin.detail, plugin
        assert plugin.fix is not None and "postgresql-15-wal2json" in plugin.fix
    finally:
        _reload(server, "ALTER SYSTEM RESET dynamic_library_path", "$libdir")
    assert checks_of(private_pipeline)["postgres.wal2json"].status == "OK"


def _reload(server: ReplicaPgServer, statement: str, expected: str) -> None:
    """Apply a reloadable setting and wait until new sessions see it (a reload is asynchronous)."""
    _set_system(server, statement)
    _set_system(server, "SELECT pg_reload_conf()")

    def seen() -> bool:
        with server.connect() as conn:
            return conn.execute("SHOW dynamic_library_path").fetchone() == (expected,)

    wait_until(seen, 30, f"dynamic_library_path = {expected}")


@pytest.fixture
def shared_shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=20)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def test_role_without_replication_then_granted(shared_shop: Shop, services: dict[str, str]) -> None:
    role = f"pf_{uuid.uuid4().hex[:8]}"
    admin = normalize_url(services["postgres"]).replace("+psycopg", "")
    shop_db = shared_shop.url.rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        with psycopg.connect(admin.rsplit("/", 1)[0] + f"/{shop_db}", autocommit=True) as conn:
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
        config = shared_shop.directory / "pipeline.yaml"
        as_role = shared_shop.url.replace("sparkindex@", f"{role}@")
        config.write_text(config.read_text(encoding="utf-8").replace(shared_shop.url, as_role), encoding="utf-8")

        checks = checks_of(config)
        assert checks["source.reachable"].status == "OK" and role in as_role
        privilege = checks["postgres.replication_privilege"]
        assert privilege.status == "FAIL" and f"role {role!r} lacks the REPLICATION attribute" in privilege.detail
        assert checks["postgres.wal2json"].status == "WARN", "without REPLICATION the plugin cannot be probed"

        fix = sql_of(privilege.fix)
        assert fix == f'ALTER ROLE "{role}" WITH REPLICATION', fix
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(fix)
        checks = checks_of(config)
        assert checks["postgres.replication_privilege"].status == "OK"
        assert checks["postgres.wal2json"].status == "OK", checks["postgres.wal2json"]
    finally:
        drop_pg_shop(shared_shop, services["postgres"])  # the role's grants go with the database
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_replica_identity_of_a_related_table(shared_shop: Shop) -> None:
    """A review's delete must log its product_id to find the product document it belonged to."""
    config = shared_shop.directory / "pipeline.yaml"
    assert checks_of(config)["postgres.replica_identity"].status == "OK"  # the shop has FULL on reviews
    shared_shop.sql("ALTER TABLE reviews REPLICA IDENTITY DEFAULT")
    checks = checks_of(config)
    identity = checks["postgres.replica_identity:reviews"]
    assert identity.status == "FAIL" and "must reveal product_id" in identity.detail, identity
    assert "postgres.replica_identity" not in checks
    shared_shop.sql(sql_of(identity.fix))
    assert checks_of(config)["postgres.replica_identity"].status == "OK"
