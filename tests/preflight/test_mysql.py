"""MariaDB change capture prerequisites on a private server of this module's own (the shared one on
53306 serves other tests and a chaos campaign: its globals are never touched):

* started as a default install runs, without a binlog, with statement-based, minimal row images
  and no strict GTIDs: every setting fails or warns; the SET GLOBAL fixes are applied as the checks
  word them, then the server is restarted with log_bin (the fix of the last one);
* a user without the replication grants (the fix: the GRANT the check names);
* binlogs that expire sooner than the minimum (a warning; the fix raises the retention).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from chaos.servers import MariaDbServer, _socket_dir, _wait_for

from sparkindex.demo.shop import generate_shop
from tests.capture.helpers import write_pipeline
from tests.e2e.shop import copy_shop
from tests.preflight.helpers import checks_of, free_port, sql_of, statuses

pytestmark = [pytest.mark.mysql, pytest.mark.slow]

SETTINGS = ("mysql.binlog_format", "mysql.binlog_row_image", "mysql.binlog_row_metadata")


class PlainMariaDb(MariaDbServer):
    """A private MariaDB started as a default install runs (no binlog); with :attr:`log_bin` set,
    as PgServer's sibling starts it (the binlog settings change capture needs)."""

    log_bin = False

    def _spawn(self) -> None:
        if self.log_bin:
            super()._spawn()
            return
        out = open(self.workdir / "mariadbd.out", "ab")  # noqa: SIM115 - the server's, closed below
        try:
            self.proc = subprocess.Popen(
                [
                    "mariadbd",
                    *(["--user=mysql"] if os.geteuid() == 0 else []),
                    f"--datadir={self.data}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--socket={_socket_dir(self.data)}/mariadbd-{self.port}.sock",
                    f"--pid-file={self.pid_file}",
                    f"--log-error={self.data}/error.log",
                    "--server-id=1",
                    "--character-set-server=utf8mb4",
                    "--collation-server=utf8mb4_bin",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        finally:
            out.close()
        _wait_for(f"MariaDB on {self.port} accepting connections", self.ready)


@pytest.fixture(scope="module")
def server() -> Iterator[PlainMariaDb]:
    workdir = Path(tempfile.mkdtemp(prefix="sparkindex-preflight-maria-"))
    maria = PlainMariaDb(workdir, free_port()).start()
    yield maria
    maria.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def pipeline(server: PlainMariaDb, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shop in the private server, with a ``sync:`` section (change capture is asked for)."""
    directory = tmp_path_factory.mktemp("maria-shop")
    generate_shop(directory / "shop.db", 20)
    server.create_database("shop")
    copy_shop(directory / "shop.db", server.url("shop"))
    write_pipeline(directory, server.url("shop"), f"t{uuid.uuid4().hex[:8]}")
    return directory / "pipeline.yaml"


def _restart_with_binlog(server: PlainMariaDb) -> None:
    server.stop()
    server.log_bin = True
    server.start()


def test_no_binlog_settings_then_fixed(server: PlainMariaDb, pipeline: Path) -> None:
    if server.log_bin:
        pytest.skip("the server was restarted with a binlog by an earlier run of this module")
    server.query(
        "SET GLOBAL binlog_format = 'STATEMENT'",
        "SET GLOBAL binlog_row_image = 'MINIMAL'",
        "SET GLOBAL binlog_row_metadata = 'MINIMAL'",
        "SET GLOBAL gtid_strict_mode = OFF",
    )
    checks = checks_of(pipeline)
    assert statuses(checks, "mysql.") == {
        "mysql.log_bin": "FAIL",
        "mysql.binlog_format": "FAIL",
        "mysql.binlog_row_image": "FAIL",
        "mysql.binlog_row_metadata": "FAIL",
        "mysql.gtid": "WARN",
        "mysql.grants": "WARN",  # nothing to probe without a binlog
        "mysql.binlog_retention": "OK",
    }, [c.line() for c in checks.values()]
    assert "binlog_format = STATEMENT" in checks["mysql.binlog_format"].detail
    assert checks["mysql.log_bin"].fix is not None and "log-bin" in checks["mysql.log_bin"].fix

    for name in (*SETTINGS, "mysql.gtid"):
        server.query(sql_of(checks[name].fix))
    checks = checks_of(pipeline)
    assert {n: checks[n].status for n in (*SETTINGS, "mysql.gtid")} == {n: "OK" for n in (*SETTINGS, "mysql.gtid")}
    assert checks["mysql.log_bin"].status == "FAIL"

    _restart_with_binlog(server)
    checks = checks_of(pipeline)
    assert set(statuses(checks, "mysql.").values()) == {"OK"}, [c.line() for c in checks.values()]
    assert {c.status for c in checks.values()} == {"OK"}, [c.line() for c in checks.values() if c.status != "OK"]


@pytest.fixture
def binlog_server(server: PlainMariaDb) -> PlainMariaDb:
    if not server.log_bin:
        _restart_with_binlog(server)
    return server


@pytest.fixture
def user(binlog_server: PlainMariaDb) -> Iterator[str]:
    """A user with SELECT on the shop only (at 'localhost': the server sees 127.0.0.1 so)."""
    name = f"u{uuid.uuid4().hex[:8]}"
    binlog_server.query(
        f"CREATE USER '{name}'@'localhost' IDENTIFIED BY 'Pw{name}'",
        f"GRANT SELECT ON `shop`.* TO '{name}'@'localhost'",
    )
    yield name
    with contextlib.suppress(Exception):  # teardown of a throwaway user: the test's assertions already ran
        binlog_server.query(f"DROP USER IF EXISTS '{name}'@'localhost'")


def test_user_without_replication_grants_then_granted(binlog_server: PlainMariaDb, pipeline: Path, user: str) -> None:
    config = pipeline.parent / f"{user}.yaml"
    as_user = sa.make_url(binlog_server.url("shop")).set(username=user, password=f"Pw{user}")
    text = pipeline.read_text(encoding="utf-8").replace(
        binlog_server.url("shop"), as_user.render_as_string(hide_password=False)
    )
    config.write_text(text, encoding="utf-8")
    checks = checks_of(config)
    assert checks["source.reachable"].status == "OK"
    grants = checks["mysql.grants"]
    assert grants.status == "FAIL" and "Access denied" in grants.detail, grants
    assert f"Pw{user}" not in grants.line()

    fix = sql_of(grants.fix).replace("'<host>'", "'localhost'")
    assert fix == f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'localhost'", fix
    binlog_server.query(fix)
    assert checks_of(config)["mysql.grants"].status == "OK"


def test_binlog_retention_under_the_minimum(binlog_server: PlainMariaDb, pipeline: Path) -> None:
    binlog_server.query("SET GLOBAL binlog_expire_logs_seconds = 3600")
    try:
        retention = checks_of(pipeline)["mysql.binlog_retention"]
        assert retention.status == "WARN" and "less than the minimum of 7 days" in retention.detail, retention
        assert checks_of(pipeline, min_binlog_retention_s=1800.0)["mysql.binlog_retention"].status == "OK"
        binlog_server.query(sql_of(retention.fix))
        assert checks_of(pipeline)["mysql.binlog_retention"].status == "OK"
    finally:
        binlog_server.query("SET GLOBAL binlog_expire_logs_seconds = 0")
