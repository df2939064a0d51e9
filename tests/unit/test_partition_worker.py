"""PartitionWorker liveness on real parts (store, source, Tantivy), no Spark.

* Leases are renewed while a page is read: a worker whose SELECT is blocked keeps its claim alive.
* When the target is down, the worker stops reading the partition and parks it (CLOSED).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from tests.e2e.guarantee_helpers import pg_table, write_pipeline
from tests.e2e.shop import make_shop, wait_for

from sparkindex.config.model import Pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import DocumentBuilder, Page, make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.finalize import adopt_completed_stages
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from sparkindex.targets.tantivy.wire import service_address
from sparkindex.worker.partition import PartitionOutcome, PartitionWorker, WorkerSettings

P = PartitionStatus


class CountingBuilder(DocumentBuilder):
    """The real Python builder, counting the pages it reads."""

    pages = 0

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        self.pages += 1
        return super().page(rng, after, limit)


def plan_job(pipeline: Pipeline, target: TantivyTarget, alias: str) -> tuple[CoordinationStore, str, str, Any]:
    """A RUNNING job with its version and partitions planned, as the driver leaves it for the workers;
    returns (store, job id, index, plan)."""
    source = open_source_url(pipeline.source_url())
    plan, mapping = resolve_plans(pipeline, source, [alias])[alias]
    store = CoordinationStore(pipeline.coordination_url())
    job = store.job_rows.create_job([alias], {"aliases": [alias]}, "test")
    index = target.create_version(alias, mapping)
    store.job_rows.update_job(job.id, targets={alias: index})
    specs = plan_partitions(source, [EntityPlanInput(plan.config, plan.table, plan.id_columns)], pipeline.job)
    store.partition_rows.add_partitions(job.id, specs)
    store.job_rows.transition_job(job.id, JobStatus.READY)
    store.job_rows.transition_job(job.id, JobStatus.RUNNING)
    return store, job.id, index, plan


def run_in_thread(worker: PartitionWorker, pid: str) -> tuple[threading.Thread, dict[str, PartitionOutcome]]:
    result: dict[str, PartitionOutcome] = {}

    def go() -> None:
        result["outcome"] = worker.run(pid, f"test:{uuid.uuid4().hex[:6]}")

    thread = threading.Thread(target=go, name="partition-worker", daemon=True)
    thread.start()
    return thread, result


# -- leases --------------------------------------------------------------------------------------------
@pytest.fixture
def blocked_table(services: dict[str, str]) -> Iterator[str]:
    rows = [(i, f"row {i} 'quoted' \\ and ünïcode") for i in range(1, 3001)]
    with pg_table(services["postgres"], "id integer PRIMARY KEY, body text NOT NULL", rows, "lease") as name:
        yield name


@pytest.mark.postgres
def test_lease_is_renewed_while_a_page_read_is_blocked(
    tmp_path: Path, services: dict[str, str], blocked_table: str
) -> None:
    pg = services["postgres"]
    pipeline = write_pipeline(tmp_path, pg, "leased", blocked_table, "    partition_size: 5000\n    page_size: 500\n")
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index", writer_heap_mb=32, writer_threads=1))
    store, job_id, index, plan = plan_job(pipeline, target, "leased")
    [part] = store.partition_rows.partitions(job_id)
    builder = make_builder(open_source_url(pipeline.source_url()), plan)  # resolved before the table is locked
    settings = WorkerSettings(batch_size=500, claim_timeout_s=1.0, retries=1, backoff_initial_s=0.05)
    worker = PartitionWorker(store, target, lambda _: builder, job_id, "run-1", {"leased": index}, settings)

    engine = sa.create_engine(normalize_url(pg))
    watcher = sa.create_engine(normalize_url(pg), isolation_level="AUTOCOMMIT")
    locker = engine.connect()
    thread = None
    try:
        tx = locker.begin()
        locker.exec_driver_sql(f"LOCK TABLE {blocked_table} IN ACCESS EXCLUSIVE MODE")
        thread, result = run_in_thread(worker, part.id)

        def worker_waits_on_the_lock() -> bool:
            with watcher.connect() as conn:
                waiting = conn.exec_driver_sql(
                    f"SELECT count(*) FROM pg_locks WHERE relation = '{blocked_table}'::regclass AND NOT granted"
                ).scalar()
            return bool(waiting)

        wait_for(worker_waits_on_the_lock, 30, "the worker's SELECT to wait on the table lock")
        claimed = store.partition_rows.partition(part.id)
        assert claimed.status == P.PROCESSING and claimed.claims == 1
        beats: set[float] = set()

        def heartbeat_advanced_three_times() -> bool:
            hb = store.partition_rows.partition(part.id).last_heartbeat
            assert hb is not None
            beats.add(hb)
            return len(beats) >= 4

        wait_for(heartbeat_advanced_three_times, 15, "three lease renewals while the read is blocked")
        assert worker_waits_on_the_lock(), "the read must still be blocked: the renewals came from the lease"
        now = time.time()
        renewed = store.partition_rows.partition(part.id)
        assert renewed.last_heartbeat is not None and now - renewed.last_heartbeat < 1.0
        assert claimed.last_heartbeat is not None and now - claimed.last_heartbeat > 1.0, (
            "long enough blocked that the first lease alone would have gone stale"
        )
        # Another worker sees a live lease and cannot take the partition.
        assert store.partition_rows.claim(part.id, "other", "other-run", stale_after_s=1.0) is None
        assert store.partition_rows.partition(part.id).claim_token == claimed.claim_token

        tx.commit()  # the table lock goes: the blocked read proceeds and the partition completes
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        locker.close()
        if thread is not None:
            thread.join(timeout=60)
        engine.dispose()
        watcher.dispose()
    outcome = result["outcome"]
    assert (outcome.status, outcome.indexed, outcome.failed) == ("completed", 3000, 0), outcome
    done = store.partition_rows.partition(part.id)
    assert (done.status, done.claims, done.success_count) == (P.COMPLETED, 1, 3000)
    adopt_completed_stages(store, target, job_id, {"leased": index})
    assert target.count(index) == 3000
    target.finish_version(index)


# -- staged builds -----------------------------------------------------------------------------------
def test_a_staged_attempt_seals_often_and_never_writes_through_the_service(tmp_path: Path) -> None:
    """Every batch goes to a stage, before and after each seal; each seal is recorded with its
    batches; what the finish adopts is every row once."""
    pipeline = make_shop(tmp_path, products=1000, partition_size=1000, page_size=100)
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index"))
    store, job_id, index, plan = plan_job(pipeline, target, "products")
    [part] = store.partition_rows.partitions(job_id)
    builder = CountingBuilder(open_source_url(pipeline.source_url()), plan)
    settings = WorkerSettings(batch_size=100, sync_every_s=0.0)  # seal after every batch
    worker = PartitionWorker(store, target, lambda _: builder, job_id, "run-1", {"products": index}, settings)

    outcome = worker.run(part.id, "test:worker")

    assert (outcome.status, outcome.indexed) == ("completed", 1000), outcome
    done = store.partition_rows.partition(part.id)
    assert len(done.stage_names) == 10, done.stage_names
    assert target._writer_client(index).request({"op": "ping"}, start=False) is None, "no writer service ran"
    assert not (tmp_path / "index" / index / "sparkindex-service.log").exists()
    adopt_completed_stages(store, target, job_id, {"products": index})
    ids = [i for i, _ in target.scan_hashes(index)]
    assert len(ids) == len(set(ids)) == 1000


# -- target down ------------------------------------------------------------------------------------
def test_worker_stops_reading_and_parks_the_partition_when_the_target_is_down(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=1000, partition_size=1000, page_size=100)
    # The writer service's address is taken by a socket that refuses every connection, and no
    # service can bind it: the target is down. Each attempt gives up after lock_timeout_s.
    target = TantivyTarget(
        TantivyTargetConfig(
            root=tmp_path / "index", writer_heap_mb=32, writer_threads=1, lock_timeout_s=0.5, staged_builds=False
        )
    )
    store, job_id, index, plan = plan_job(pipeline, target, "products")
    [part] = store.partition_rows.partitions(job_id)
    builder = CountingBuilder(open_source_url(pipeline.source_url()), plan)
    settings = WorkerSettings(
        batch_size=100, retries=1, backoff_initial_s=0.01, backoff_max_s=0.05, reopen_after_s=60.0
    )
    worker = PartitionWorker(store, target, lambda _: builder, job_id, "run-1", {"products": index}, settings)

    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(service_address(tmp_path / "index" / index))  # bound, never listening
    try:
        started = time.time()
        outcome = worker.run(part.id, "test:worker")
    finally:
        squatter.close()
    assert outcome.status == "closed", outcome
    assert outcome.indexed == 0 and index in (outcome.error or "")
    # Pages of the batches in flight, plus the one being built when the first bulk gave up.
    most = settings.max_in_flight + 1
    assert 1 <= builder.pages <= most, f"read {builder.pages} of 10 pages: the worker kept reading with the target down"
    parked = store.partition_rows.partition(part.id)
    assert parked.status == P.CLOSED
    assert parked.reopen_at is not None and parked.reopen_at >= started + 60.0
    assert parked.cursor is None, "no batch was acknowledged, so the cursor must not move"
    assert (parked.success_count, parked.processed_count) == (0, 0)
    assert parked.last_error is not None and parked.last_error.startswith("target:") and index in parked.last_error
    assert parked.retry_count == 0, "a down target is not the partition's failure"
    # Parked until reopen_at: another worker does not pick it up early.
    assert worker.run(part.id, "test:again").status == "skipped"
    assert store.partition_rows.partition(part.id).claims == 1
    assert store.dead_letters.count(job_id) == 0


# -- writes lost by a restarted writer ----------------------------------------------------------
class KillingBuilder(CountingBuilder):
    """The real builder; on its Nth page it SIGKILLs the index's writer service, as a crash would,
    while earlier batches are applied but not yet synced."""

    kill_on_page = 4
    target: TantivyTarget
    index: str
    killed: int | None = None

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        if self.pages + 1 == self.kill_on_page and self.killed is None:
            reply = self.target._writer_client(self.index).request({"op": "ping"}, start=False)
            assert reply is not None, "batches were sent, so the service must be running"
            self.killed = int(reply["pid"])
            os.kill(self.killed, signal.SIGKILL)
        return super().page(rng, after, limit)


def test_writes_lost_by_a_killed_writer_service_are_read_again(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=1000, partition_size=1000, page_size=100)
    # the writer service (staged builds write no service a crash could kill)
    config = TantivyTargetConfig(root=tmp_path / "index", writer_heap_mb=32, writer_threads=1, staged_builds=False)
    target = TantivyTarget(config)
    store, job_id, index, plan = plan_job(pipeline, target, "products")
    [part] = store.partition_rows.partitions(job_id)
    builder = KillingBuilder(open_source_url(pipeline.source_url()), plan)
    builder.target, builder.index = target, index
    # Batches of one page, never synced before the end: everything before the kill is unsynced.
    settings = WorkerSettings(batch_size=100, sync_every_s=3600, backoff_initial_s=0.01, backoff_max_s=0.05)
    worker = PartitionWorker(store, target, lambda _: builder, job_id, "run-1", {"products": index}, settings)

    outcome = worker.run(part.id, "test:worker")

    assert builder.killed is not None
    assert (outcome.status, outcome.indexed) == ("completed", 1000), outcome
    assert builder.pages > 11, "the pages whose writes were lost were read again"
    done = store.partition_rows.partition(part.id)
    assert (done.status, done.success_count, done.claims) == (P.COMPLETED, 1000, 1)
    target.finish_version(index)
    ids = [i for i, _ in target.scan_hashes(index)]
    assert len(ids) == len(set(ids)) == 1000


def test_a_permanent_error_fails_the_partition_not_the_spark_job(tmp_path: Path) -> None:
    """A write that can never succeed (here: its index version was deleted under the job) is
    counted against the partition (retry_count, last_error); the task returns normally."""
    pipeline = make_shop(tmp_path, products=300, partition_size=300, page_size=100)
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index", writer_heap_mb=32, writer_threads=1))
    store, job_id, index, _ = plan_job(pipeline, target, "products")
    [part] = store.partition_rows.partitions(job_id)
    target.delete_version(index)
    source = open_source_url(pipeline.source_url())
    worker = PartitionWorker(
        store,
        target,
        lambda alias: make_builder(source, resolve_plans(pipeline, source, [alias])[alias][0]),
        job_id,
        "run-1",
        {"products": index},
        WorkerSettings(batch_size=100, partition_retries=3),
    )
    outcome = worker.run(part.id, "test:worker")
    assert outcome.status == "failed" and index in (outcome.error or ""), outcome
    after = store.partition_rows.partition(part.id)
    assert (after.status, after.retry_count, after.success_count) == (P.PENDING, 1, 0)
    assert index in (after.last_error or "")
