"""What a stop_driver that saw no takeover reports: the sessions waiting on a lock, and the ones
they wait for. The likeliest reason a second driver cannot take over from a frozen one is a
transaction the frozen group left open; this makes one for real (a row updated and left idle in
transaction, a second session blocked behind it) and checks both show.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from chaos.trial import TrialRun

from sparkindex.config.urls import normalize_url
from tests.e2e.shop import drop_database, fresh_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def database(services: dict[str, str]) -> Iterator[tuple[str, str]]:
    admin_url = normalize_url(services["postgres"])
    name = f"t_waits_{uuid.uuid4().hex[:10]}"
    url = fresh_database(admin_url, name)
    try:
        yield name, url
    finally:
        drop_database(admin_url, name)


def test_a_session_blocked_behind_an_idle_transaction_is_reported_with_its_blocker(database: tuple[str, str]) -> None:
    name, url = database
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE si_job (id text PRIMARY KEY, run_id text)")
        conn.exec_driver_sql("INSERT INTO si_job VALUES ('job-1', 'run-1')")
    trial = object.__new__(TrialRun)
    trial.store_db, trial.source_db = name, "no_such_database"
    server = sa.make_url(url)
    trial.pg = type("Pg", (), {"url": lambda self, db: server.set(database=db).render_as_string(hide_password=False)})()
    assert trial.server_waits() == []  # nothing waits, nothing is left open

    frozen = engine.connect()  # the frozen driver's transaction: a row updated, never committed
    frozen.exec_driver_sql("UPDATE si_job SET run_id = 'run-1' WHERE id = 'job-1'")
    frozen_pid = frozen.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    done: list[int] = []
    blocked = threading.Thread(target=_take_over, args=(engine, done), daemon=True)
    blocked.start()
    try:
        deadline = time.monotonic() + 30
        waits: list[str] = []
        while not any("waiting on Lock" in w for w in waits) and time.monotonic() < deadline:
            time.sleep(0.1)  # the polling pace, until the second session is seen waiting
            waits = trial.server_waits()
        assert any(f"held by [{frozen_pid}]" in w and "UPDATE si_job SET run_id = 'run-2'" in w for w in waits), waits
        assert any(w.startswith(f"pid {frozen_pid} on {name} idle in transaction") for w in waits), waits
    finally:
        frozen.rollback()
        frozen.close()
        blocked.join(timeout=30)
        engine.dispose()
    assert not blocked.is_alive() and done == [1]  # the blocked update went through once freed


def _take_over(engine: sa.Engine, done: list[int]) -> None:
    with engine.begin() as conn:
        done.append(conn.exec_driver_sql("UPDATE si_job SET run_id = 'run-2' WHERE id = 'job-1'").rowcount)
