"""Poolers in front of PostgreSQL: the store behind transaction pooling is supported and said so,
behind statement pooling refused; a PostgreSQL source whose statement timeout a pooler refuses or
drops is refused by `check` (and by a run's preflight, exit 2) with the fix, because the source
needs a session of its own. The poolers are real PgBouncers: the suite's (transaction pooling),
and private ones started here with other settings."""

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

from sparkindex.coordination.tables import make_tables
from sparkindex.preflight.pooler import transaction_pooled
from tests.e2e.shop import wait_for
from tests.preflight.helpers import check_json, checks_of, free_port

pytestmark = pytest.mark.postgres

SHOP = """\
source:
  url: {source}
indexes:
  - alias: products
    table: products
    id: id
target:
  url: tantivy://{index}
coordination:
  url: {store}
  prefix: {prefix}
spark:
  master: local[1]
"""


@pytest.fixture
def prefix(services: dict[str, str]) -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:8]}_"
    yield name
    engine = sa.create_engine(services["postgres"].replace("postgresql://", "postgresql+psycopg://"))
    make_tables(name).metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def database(services: dict[str, str]) -> Iterator[str]:
    """A fresh database on the suite's PostgreSQL with one table; its name. (A database, not a
    schema on ``search_path``: that is a startup option, which PgBouncer refuses.)"""
    name = f"t_{uuid.uuid4().hex[:12]}"
    server = services["postgres"].replace("postgresql://", "postgresql+psycopg://")
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine = sa.create_engine(server.rsplit("/", 1)[0] + f"/{name}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE products (id int PRIMARY KEY, name text)"))
        conn.execute(sa.text("INSERT INTO products VALUES (1, 'Zoë; renamed, again'), (2, NULL)"))
    engine.dispose()
    try:
        yield name
    finally:
        with admin.connect() as conn:  # FORCE: PgBouncer may still hold a server session to it
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_the_probe_tells_pgbouncer_from_postgresql(services: dict[str, str]) -> None:
    assert transaction_pooled(services["pgbouncer"]) is True
    assert transaction_pooled(services["postgres"]) is False


def _write(tmp_path: Path, source: str, store: str, prefix: str) -> Path:
    config = tmp_path / "pipeline.yaml"
    text = SHOP.format(source=source, store=store, prefix=prefix, index=tmp_path / "index")
    config.write_text(text, encoding="utf-8")
    return config


def test_a_store_behind_pgbouncer_is_supported_and_said_so(
    tmp_path: Path, services: dict[str, str], database: str, prefix: str
) -> None:
    source = services["postgres"].rsplit("/", 1)[0] + f"/{database}"
    checks = checks_of(_write(tmp_path, source, services["pgbouncer"], prefix))
    assert checks["store.pooler"].status == "OK", checks["store.pooler"]
    assert "transaction pooling" in checks["store.pooler"].detail
    assert checks["store.reachable"].status == "OK"
    assert "source.pooler" not in checks
    direct = checks_of(_write(tmp_path, source, services["postgres"], prefix))
    assert "store.pooler" not in direct, "a store reached directly is not taken for a pooled one"


def test_a_source_behind_pgbouncer_is_refused_with_the_fix(
    tmp_path: Path, cli: Path, services: dict[str, str], database: str, prefix: str
) -> None:
    pooled_source = services["pgbouncer"].rsplit("/", 1)[0] + f"/{database}"
    config = _write(tmp_path, pooled_source, services["postgres"], prefix)
    run, report = check_json(cli, config)
    assert run.returncode != 0
    found = {c["name"]: c for c in report["checks"]}
    refusal = found["source.pooler"]
    assert refusal["status"] == "FAIL"
    assert "source.url" in refusal["detail"] and "connection pooler" in refusal["detail"]
    assert "coordination.url" in refusal["fix"]
    reindex = subprocess.run([str(cli), "reindex", "-c", str(config)], capture_output=True, text=True, timeout=300)
    assert reindex.returncode == 2, reindex.stderr[-3000:]
    assert "source.pooler" in reindex.stderr or "connection pooler" in reindex.stderr
    assert not (tmp_path / "index").exists() or not any((tmp_path / "index").iterdir()), "nothing was built"


@contextlib.contextmanager
def private_bouncer(pool_mode: str, ignore: str) -> Iterator[str]:
    """A PgBouncer of its own in front of the suite's PostgreSQL (as user postgres: it refuses
    root; its folder outside pytest's, which that user cannot enter); its URL's server part."""
    if os.geteuid() != 0 or shutil.which("pgbouncer") is None:
        pytest.skip("needs root (to run PgBouncer as postgres) and Debian's pgbouncer")
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="sparkindex-pgbouncer-"))
    folder.chmod(0o777)
    (folder / "users.txt").write_text('"sparkindex" ""\n', encoding="utf-8")
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        f"[databases]\n* = host=127.0.0.1 port=55432\n[pgbouncer]\nlisten_addr = 127.0.0.1\n"
        f"listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\nignore_startup_parameters = {ignore}\nlogfile = {folder / 'log'}\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen(["su", "postgres", "-s", "/bin/sh", "-c", f"exec pgbouncer {ini}"])
    try:
        ready = ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "sparkindex", "-d", "sparkindex"]
        wait_for(lambda: subprocess.run(ready).returncode == 0, 30, "the private PgBouncer", every=0.1)
        yield f"postgresql://sparkindex@127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_source_behind_a_pooler_that_drops_the_timeout_is_refused(
    tmp_path: Path, services: dict[str, str], database: str, prefix: str
) -> None:
    """Told to ignore the startup option that carries the statement timeout, PgBouncer connects
    the source without it: the source's queries would run unbounded, so it is refused."""
    with private_bouncer("transaction", "extra_float_digits,options") as server:
        config = _write(tmp_path, f"{server}/{database}", services["postgres"], prefix)
        refusal = checks_of(config)["source.pooler"]
    assert refusal.status == "FAIL", refusal
    assert "source.url" in refusal.detail and "dropped it" in refusal.detail, refusal.detail
    assert refusal.fix is not None and "coordination.url" in refusal.fix


def test_a_store_behind_a_statement_pooler_is_refused(
    tmp_path: Path, services: dict[str, str], database: str, prefix: str
) -> None:
    source = services["postgres"].rsplit("/", 1)[0] + f"/{database}"
    with private_bouncer("statement", "extra_float_digits") as server:
        refusal = checks_of(_write(tmp_path, source, f"{server}/sparkindex", prefix))["store.pooler"]
    assert refusal.status == "FAIL", refusal
    assert "statement pooling" in refusal.detail
    assert refusal.fix is not None and "pool_mode = transaction" in refusal.fix
