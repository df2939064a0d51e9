"""Shared fixtures: one SparkSession per test session, and sample shops on disk."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A standalone cluster (its master, workers and their 2 GB each) runs in the serial phase."""
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from sparkindex.config.connections import SparkConfig
    from sparkindex.spark.session import build_session

    session = build_session(SparkConfig(master="local[2,4]"))
    yield session
    session.stop()


@pytest.fixture
def cli() -> Path:
    """The installed ``sparkindex`` command of this venv."""
    return Path(sys.executable).parent / "sparkindex"


# -- database servers (started by `make test` through scripts/test-services.sh) ----------------------
ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("SPARKINDEX_TEST_PG_URL", "postgresql://sparkindex@127.0.0.1:55432/sparkindex")
MYSQL_URL = os.environ.get("SPARKINDEX_TEST_MYSQL_URL", "mysql://root@127.0.0.1:53306/sparkindex")
#: the same PostgreSQL through PgBouncer in transaction pooling (scripts/test-pgbouncer.sh)
PGBOUNCER_URL = os.environ.get("SPARKINDEX_TEST_PGBOUNCER_URL", "postgresql://sparkindex@127.0.0.1:56432/sparkindex")


@pytest.fixture(scope="session")
def services() -> dict[str, str]:
    """Make sure the private PostgreSQL, PgBouncer and MariaDB servers run (idempotent), return their URLs."""
    import subprocess

    subprocess.run(["bash", str(ROOT / "scripts" / "test-services.sh")], check=True, capture_output=True)
    return {"postgres": PG_URL, "mysql": MYSQL_URL, "pgbouncer": PGBOUNCER_URL}


STORE_KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]
#: PostgreSQL behind PgBouncer in transaction pooling (no session state survives a transaction):
#: the coordination conformance suite (tests/coordination) runs through it as a fourth store kind
PGBOUNCER_KIND = pytest.param("pgbouncer", id="pgbouncer", marks=pytest.mark.postgres)


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url, table prefix) of a fresh coordination store, for every store kind (conformance suite).

    Server-backed stores get a unique table prefix per test, dropped afterwards, so tests never
    see each other's rows.
    """
    yield from fresh_store(request, tmp_path)


def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The body of every ``store_url`` fixture: *request.param* names the store kind."""
    import uuid

    kind = request.param
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}", ""
        return
    urls = request.getfixturevalue("services")
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    yield urls[kind], prefix
    from sparkindex.coordination.engine import make_engine
    from sparkindex.coordination.tables import make_tables

    engine = make_engine(urls[kind])
    make_tables(prefix).metadata.drop_all(engine)
    engine.dispose()
