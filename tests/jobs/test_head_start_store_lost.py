"""The driver's head start when the coordination store is out of reach.

The head start runs on a thread of the reindex driver. An exception escaping that thread is
printed as a traceback and helps no one: the partitions it did not run are left to the Spark
passes, which have retries of their own. The chaos campaign caught one: the store black-holed
while a driver took a job over, and the head start's store connection timed out. These tests
cut the store for real (a closed port; a PostgreSQL database dropped under the thread) and
check the thread ends with one warning line, its password hidden, and no traceback.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config.connections import CoordinationConfig
from sparkindex.config.model import Pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.recovery import holder_name
from sparkindex.jobs.head_start import HeadStart
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from tests.e2e.shop import drop_database, fresh_database, make_shop
from tests.preflight.helpers import closed_port
from tests.unit.test_partition_worker import plan_job


def _with_store(pipeline: Pipeline, url: str) -> Pipeline:
    return pipeline.model_copy(update={"coordination": CoordinationConfig(url=url)})


def test_an_unreachable_store_ends_the_head_start_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = _with_store(
        make_shop(tmp_path, products=10, partition_size=5),
        f"postgresql://sparkindex:hunter2@127.0.0.1:{closed_port()}/nowhere",
    )
    head = HeadStart(pipeline, "job-1", "run-1", Future(), {}, "fp-1")
    with caplog.at_level(logging.WARNING, logger="sparkindex.jobs.head_start"):
        head._run()  # what the thread runs: an exception here would be the printed traceback
    assert head.outcomes == []
    [record] = [r for r in caplog.records if r.name == "sparkindex.jobs.head_start"]
    assert "unreachable" in record.getMessage() and "127.0.0.1" in record.getMessage(), record.getMessage()
    assert "hunter2" not in caplog.text, "the store's password reached the log"


class _DropsTheStoreWhenAsked(Future[Any]):
    """A session that is still starting; the first time the head start asks, the store's database
    is dropped (connections terminated): the store is lost between two of the thread's queries."""

    def __init__(self, admin_url: str, database: str) -> None:
        super().__init__()
        self.admin_url, self.database, self.dropped = admin_url, database, False

    def done(self) -> bool:
        if not self.dropped:
            self.dropped = True
            engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
            with engine.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE {self.database} WITH (FORCE)")
            engine.dispose()
        return super().done()


@pytest.mark.postgres
def test_a_store_lost_mid_way_ends_the_head_start_with_a_warning(
    tmp_path: Path, services: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    admin_url = normalize_url(services["postgres"])
    database = f"t_head_{uuid.uuid4().hex[:10]}"
    try:
        # the test server trusts local connections: the password is there to be kept out of the log
        store_url = sa.make_url(fresh_database(admin_url, database)).set(password="hunter2")
        pipeline = _with_store(
            make_shop(tmp_path, products=200, partition_size=20), store_url.render_as_string(hide_password=False)
        )
        target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index"))
        store, job_id, _, plan = plan_job(pipeline, target, "products")
        store.locks.acquire("products", holder_name("run-1"), 600.0)  # as the driver holds it
        store.close()
        session = _DropsTheStoreWhenAsked(admin_url, database)
        head = HeadStart(pipeline, job_id, "run-1", session, {"products": plan}, "fp-1")
        with caplog.at_level(logging.WARNING, logger="sparkindex.jobs.head_start"):
            head._run()
        assert session.dropped, "the store was dropped under the running head start"
        assert head.outcomes == [], "no partition could be claimed without the store"
        messages = [r.getMessage() for r in caplog.records if r.name == "sparkindex.jobs.head_start"]
        assert messages and "head start stopped on a database error" in messages[-1], caplog.text
        assert f'database "{database}" does not exist' in messages[-1], "the store's own error, one line"
        assert "hunter2" not in caplog.text, "the store's password reached the log"
    finally:
        drop_database(admin_url, database)
