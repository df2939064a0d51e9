"""A private MariaDB server, so that the test may restart it and change its settings (the shared
one serves other tests): a running `sparkindex sync` survives a restart by itself, and a server
without binlog_row_metadata = FULL is refused with a clear error (exit 2) naming the setting."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from chaos.servers import bootstrap_mariadb

from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import generate_shop
from tests.capture.helpers import Shop, assert_sync_survives_a_restart, write_pipeline
from tests.e2e.shop import copy_shop, fresh_database

pytestmark = [pytest.mark.mysql, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateMariaDB:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sparkindex-my-"))
        self.data = self.dir / "data"
        self.tmp = self.dir / "tmp"  # its own: chaos/servers.py::bootstrap_mariadb says why
        self.port = _free_port()
        shutil.chown(self.dir, "mysql", "mysql")
        bootstrap_mariadb(self.data, self.tmp, timeout=300)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/mysql"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "mariadbd",
                "--user=mysql",
                f"--datadir={self.data}",
                f"--tmpdir={self.tmp}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.dir}/mysqld.sock",
                f"--pid-file={self.dir}/mysqld.pid",  # not the packaged config's, which every server shares
                f"--log-error={self.dir}/error.log",
                f"--log-bin={self.dir}/binlog",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
                "--server-id=1",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_bin",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while subprocess.run(
            ["mariadb-admin", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "--silent", "ping"],
            capture_output=True,
        ).returncode:
            if time.monotonic() > deadline:
                raise RuntimeError(f"private MariaDB did not start; see {self.dir}/error.log")
            time.sleep(0.2)  # polling the server until it answers

    def admin(self, *statements: str) -> list[Any]:
        """Run *statements* as root; the rows of the last one."""
        engine = sa.create_engine(normalize_url(self.url), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                rows: list[Any] = []
                for statement in statements:
                    result = conn.exec_driver_sql(statement)
                    rows = list(result) if result.returns_rows else []
                return rows
        finally:
            engine.dispose()

    def binlogs(self) -> list[str]:
        return [str(r[0]) for r in self.admin("SHOW BINARY LOGS")]

    def purge_binlogs_to(self, newest: str, timeout: float = 60.0) -> None:
        """Purge every binlog file before *newest*, as an operator does.

        The server skips a file a binlog reader still has open. A sync that has ended closed its
        stream, but its dump thread on the server lingers until it next tries to send (a full run
        on CI once found the older file still listed after the purge), so the purge is retried
        until the list is *newest* alone; readers still there after *timeout* are named."""
        deadline = time.monotonic() + timeout
        while True:
            self.admin(f"PURGE BINARY LOGS TO '{newest}'")
            if self.binlogs() == [newest]:
                return
            if time.monotonic() > deadline:
                readers = self.admin("SELECT ID, USER, COMMAND, TIME, STATE FROM information_schema.PROCESSLIST")
                raise AssertionError(f"binlogs {self.binlogs()} still in use after {timeout:g}s: {readers}")
            time.sleep(0.1)  # polling the server: the dump thread ends on its own

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=120)
            self.proc = None

    def destroy(self) -> None:
        with contextlib.suppress(Exception):  # a server already stopped (or never started) is what destroy wants
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateMariaDB]:
    my = PrivateMariaDB()
    yield my
    my.destroy()


@pytest.fixture
def shop(tmp_path: Path, server: PrivateMariaDB, spark: Any) -> Shop:
    directory = tmp_path / "shop"
    directory.mkdir()
    generate_shop(directory / "shop.db", 100)
    url = fresh_database(server.url, f"chg_{uuid.uuid4().hex[:8]}")
    copy_shop(directory / "shop.db", normalize_url(url))
    shop = Shop(directory, url, write_pipeline(directory, url, "unused"), "unused")
    shop.reindex(spark)
    shop.sync(spark)
    return shop


def test_sync_recovers_from_a_mariadb_restart_by_itself(shop: Shop, server: PrivateMariaDB, cli: Path) -> None:
    assert_sync_survives_a_restart(shop, server, cli)


def test_missing_binlog_row_metadata_is_refused(shop: Shop, server: PrivateMariaDB, cli: Path) -> None:
    admin = sa.create_engine(normalize_url(server.url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("SET GLOBAL binlog_row_metadata = MINIMAL")
    try:
        done = subprocess.run(
            [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--until-caught-up"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr[-2000:]
        assert "binlog_row_metadata" in done.stderr and "FULL" in done.stderr
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql("SET GLOBAL binlog_row_metadata = FULL")
        admin.dispose()
