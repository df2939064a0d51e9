"""A private PostgreSQL server, so that the test may restart it (the shared one serves other
tests): a running `sparkindex sync` survives a server restart by itself, and a server without
wal_level = logical is refused with a clear error (exit 2)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.capture.helpers import Shop, assert_sync_survives_a_restart, make_pg_shop

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sparkindex-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        shutil.chown(self.dir, "postgres", "postgres")
        self._as_postgres(f"{PG_BIN}/initdb -D {self.data} -U sparkindex --auth=trust -E UTF8 >/dev/null")
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.dir}'\n"
                "max_replication_slots = 4\nmax_wal_senders = 4\nfsync = off\n"
            )
        self.set_wal_level("logical")
        self.start()
        self._as_postgres(f"{PG_BIN}/createdb -h 127.0.0.1 -p {self.port} -U sparkindex sparkindex")

    @property
    def url(self) -> str:
        return f"postgresql://sparkindex@127.0.0.1:{self.port}/sparkindex"

    def _as_postgres(self, command: str) -> None:
        subprocess.run(["su", "postgres", "-c", command], check=True, capture_output=True, timeout=300)

    def set_wal_level(self, level: str) -> None:
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(f"wal_level = {level}\n")

    def start(self) -> None:
        self._as_postgres(f"{PG_BIN}/pg_ctl -D {self.data} -l {self.dir}/server.log -w -t 120 start >/dev/null")

    def stop(self) -> None:
        self._as_postgres(f"{PG_BIN}/pg_ctl -D {self.data} -m fast -w -t 120 stop >/dev/null")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    yield pg
    pg.destroy()


@pytest.fixture
def shop(tmp_path: Path, server: PrivatePostgres, spark: Any) -> Shop:
    shop = make_pg_shop(tmp_path / "shop", server.url, products=100)
    shop.reindex(spark)
    shop.sync(spark)
    return shop


def test_sync_recovers_from_a_postgres_restart_by_itself(shop: Shop, server: PrivatePostgres, cli: Path) -> None:
    assert_sync_survives_a_restart(shop, server, cli)


def test_wal_level_not_logical_is_refused(shop: Shop, server: PrivatePostgres, cli: Path) -> None:
    # a server that has logical slots refuses to start with wal_level = replica: drop them first
    shop.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots")
    server.stop()
    server.set_wal_level("replica")
    server.start()
    try:
        done = subprocess.run(
            [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--until-caught-up"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr[-2000:]
        assert "wal_level" in done.stderr and "logical" in done.stderr
    finally:
        server.stop()
        server.set_wal_level("logical")
        server.start()
