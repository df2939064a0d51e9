"""Plans are resolved once, by the driver: workers build with the plan it fingerprinted, and a
schema change while the job runs is detected before the swap, never mixed into a version.

Real parts: a SQLite shop, the SQLite store, Tantivy, and (second test) Spark in local mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.coordination.records import EntityStats
from sparkindex.errors import PermanentError
from sparkindex.jobs.finalize import adopt_completed_stages
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.spark.context import WorkerContext
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from tests.e2e.shop import make_shop
from tests.unit.test_partition_worker import plan_job


def _add_column(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE products ADD COLUMN late_column TEXT DEFAULT 'added mid-job'")
    finally:
        engine.dispose()


def test_a_worker_builds_with_the_shipped_plan_not_the_schema_it_finds(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=300, partition_size=50)
    with TantivyTarget(TantivyTargetConfig(root=tmp_path / "index")) as target:
        store, job_id, index, plan = plan_job(pipeline, target, "products")
        with store, WorkerContext(pipeline, store) as context:
            _add_column(pipeline.source_url())  # after the driver planned, before any worker ran
            worker = context.partition_worker(job_id, "run-1", {"products": plan}, "fp-1")
            parts = store.partition_rows.partitions(job_id)
            outcomes = [worker.run(p.id, "test:pass", take_over_run=False) for p in parts]
            assert {o.status for o in outcomes} == {"completed"}
            adopt_completed_stages(store, target, job_id, {"products": index})
        target.finish_version(index)
        docs = target.read_documents(index, size=1000)
    assert len(docs) == 300
    assert not [d.id for d in docs if "late_column" in d.source], "a worker built from the schema it found"


def test_a_worker_without_its_alias_plan_refuses(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=60, partition_size=50)
    with TantivyTarget(TantivyTargetConfig(root=tmp_path / "index")) as target:
        store, job_id, _, _ = plan_job(pipeline, target, "products")
    with store, WorkerContext(pipeline, store) as context:
        worker = context.partition_worker(job_id, "run-1", {}, "fp-1")
        with pytest.raises(PermanentError, match="no document plan was shipped for alias 'products'"):
            worker.run(store.partition_rows.partitions(job_id)[0].id, "test:pass", take_over_run=False)


class AlterWhenFinalizing:
    """A progress listener (the reindex's real interface) that changes the schema the moment the
    job begins to finalize: after every partition ran, before the swap."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.altered = False

    def phase(self, text: str) -> None:
        if text.startswith("finalizing") and not self.altered:
            self.altered = True
            _add_column(self.url)

    def stats(self, stats: dict[str, EntityStats]) -> None:
        pass


@pytest.mark.slow
def test_a_schema_change_during_the_job_stops_it_before_the_swap(tmp_path: Path, spark: Any) -> None:
    pipeline = make_shop(tmp_path, products=200, partition_size=50)
    listener = AlterWhenFinalizing(pipeline.source_url())
    with pytest.raises(PermanentError) as refused:
        ReindexJob(pipeline, ["products"], new=True, progress=listener, spark_factory=lambda: spark).run()
    assert listener.altered
    message = str(refused.value)
    assert "products" in message and "schema" in message and "--new" in message, message
    with TantivyTarget(TantivyTargetConfig(root=tmp_path / "index")) as target:
        assert target.alias_target("products") is None, "the version built on the old schema was swapped in"
