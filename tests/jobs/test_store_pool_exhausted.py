"""The store's connection pool exhausted, under the reindex's progress poller.

A pool that has handed out every connection raises SQLAlchemy's ``TimeoutError`` after its
timeout, which is not a DBAPI error. The poller runs on a thread of its own and caught only DBAPI
errors, so a pool exhausted for longer than its timeout (a store black-holed under many threads)
would have ended the thread with a printed traceback and the progress bars frozen. It now warns
in one line and polls again once connections come back. (A lease's heartbeat on a server store
runs on a connection of its own thread, outside the pool.)

Real parts: a PostgreSQL store whose every pooled connection the test holds; the pool's timeout
is shortened so the test takes a second, not thirty.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config.connections import CoordinationConfig
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.records import EntityStats
from sparkindex.jobs.progress import StatsPoller
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from tests.e2e.shop import drop_database, fresh_database, make_shop
from tests.unit.test_partition_worker import plan_job

pytestmark = pytest.mark.postgres


class _Stats:
    def __init__(self) -> None:
        self.seen: list[dict[str, EntityStats]] = []

    def phase(self, text: str) -> None:
        return None

    def stats(self, stats: dict[str, EntityStats]) -> None:
        self.seen.append(stats)


@pytest.fixture
def planned(tmp_path: Path, services: dict[str, str]):  # type: ignore[no-untyped-def]
    admin_url = normalize_url(services["postgres"])
    database = f"t_pool_{uuid.uuid4().hex[:10]}"
    store_url = fresh_database(admin_url, database)
    pipeline = make_shop(tmp_path, products=40, partition_size=40).model_copy(
        update={"coordination": CoordinationConfig(url=store_url)}
    )
    store, job_id, _, _ = plan_job(pipeline, TantivyTarget(TantivyTargetConfig(root=tmp_path / "index")), "products")
    try:
        yield store, job_id
    finally:
        store.close()
        drop_database(admin_url, database)


def _exhaust(engine: sa.Engine) -> list[sa.Connection]:
    """Hold every connection of *engine*'s pool; the next checkout fails after 0.2 s."""
    pool = engine.pool
    assert isinstance(pool, sa.pool.QueuePool)
    pool._timeout = 0.2  # thirty seconds in production
    held = [engine.connect() for _ in range(pool.size() + pool._max_overflow)]
    with pytest.raises(sa.exc.TimeoutError):
        engine.connect()
    return held


def _warnings(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]


def test_the_progress_poller_warns_and_polls_again(planned, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    store, job_id = planned
    stats = _Stats()
    poller = StatsPoller(store, job_id, stats)
    held = _exhaust(store.engine)
    try:
        with caplog.at_level(logging.WARNING, logger="sparkindex.jobs.progress"):
            poller.poll()  # what the poller's thread runs: an exception here would be its traceback
    finally:
        for conn in held:
            conn.close()
    [warning] = _warnings(caplog, "sparkindex.jobs.progress")
    assert "progress poll failed" in warning and "QueuePool limit" in warning, warning
    assert stats.seen == []
    poller.poll()
    assert [list(s) for s in stats.seen] == [["products"]], "polled again once connections came back"
