"""`sparkindex serve` while its coordination store refuses connections (a store restarted or
taken down for maintenance, as operators do).

The API answers 503 with the store's error in one line and the server logs one line, not
uvicorn's "Exception in ASGI application" with a stack per request; `/metrics` says the store
is down; once the store is back, the same reads answer again with no restart of the server.

Real parts: a `sparkindex serve` process, a PostgreSQL store in a database of its own, which the
test closes to connections (and whose sessions it ends) and opens again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from sparkindex.config.urls import normalize_url
from tests.e2e.shop import drop_database, fresh_database
from tests.server.conftest import ServerProcess
from tests.server.store_fixture import populate

pytestmark = pytest.mark.postgres


@pytest.fixture
def store_database(services: dict[str, str]) -> Iterator[tuple[sa.Engine, str, str]]:
    admin_url = normalize_url(services["postgres"])
    database = f"t_srv_{uuid.uuid4().hex[:10]}"
    url = fresh_database(admin_url, database)
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        yield admin, database, url
    finally:
        admin.dispose()
        drop_database(admin_url, database)  # closed to connections or not


def _close(admin: sa.Engine, database: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )


def _open(admin: sa.Engine, database: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")


def _store_up(server: ServerProcess) -> float:
    families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
    return families["sparkindex_coordination_up"].samples[0].value


def test_the_api_answers_503_in_one_line_while_the_store_is_down(
    tmp_path: Path, store_database: tuple[sa.Engine, str, str], start_server: Callable[..., ServerProcess]
) -> None:
    admin, database, url = store_database
    populated = populate(tmp_path / "shop", url)
    populated.close()
    server = start_server(populated.config)
    assert [j["id"] for j in server.get("/api/jobs")["jobs"]] == [populated.running_job, populated.done_job]

    _close(admin, database)
    reads = ["/api/jobs", f"/api/jobs/{populated.running_job}", f"/api/jobs/{populated.running_job}/partitions"]
    for path in reads:
        answer = server.http.get(path)
        assert answer.status_code == 503, (path, answer.status_code, answer.text)
        message = answer.json()["error"]
        assert "coordination store" in message and database in message, message
        assert "\n" not in message
    assert _store_up(server) == 0.0

    log = server.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
    assert sum("coordination store" in line for line in log.splitlines()) >= len(reads), log[-3000:]

    _open(admin, database)
    assert [j["id"] for j in server.get("/api/jobs")["jobs"]] == [populated.running_job, populated.done_job]
    assert _store_up(server) == 1.0
