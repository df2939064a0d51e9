"""Writes that landed in an index written in place but were never acknowledged.

A search engine (OpenSearch here, on osmem-server, a TEST DOUBLE) is written in place: a bulk
that lands is in the index whether or not its worker lives to record it. When the worker is
killed between the two, and a row of that batch is deleted at the source before the partition
is redone, the redo (from the cursor) never reads that row again. Its document must not stay in
the new version: the job must complete with the index equal to the source, and the count check
before the swap must still catch writes that are really lost.

Real parts throughout: a Python worker killed with SIGKILL (its own process), the shop as source
(SQLite; PostgreSQL with a ``sync:`` section, where the reindex catches up on Spark), a SQLite
store, osmem as target, the real PartitionWorker and finalize.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.catch_up import CatchUp
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.swap_log import MOVED
from sparkindex.documents.builder import DocumentBuilder, Page, make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.finalize import finalize_job
from sparkindex.resources import open_source_url, open_store, open_target
from sparkindex.sources.base import KeyRange
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.targets.base import BulkItem
from sparkindex.targets.target import Target
from sparkindex.verify.local import verify_alias
from sparkindex.worker.partition import PartitionWorker, WorkerSettings
from tests.capture.helpers import drop_pg_shop, make_pg_shop
from tests.e2e.shop import execute, make_shop, wait_for
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)
from tests.support.osmem import OsmemCluster

pytestmark = pytest.mark.slow
P = PartitionStatus
ALIAS = "products"
PAGE = 100  # rows per page and documents per batch: the first bulk is exactly the first page
RUN = "run-1"  # the rerun is Spark's retry of the same task: same run, a new claim


def settings() -> WorkerSettings:
    return WorkerSettings(batch_size=PAGE, retries=2, backoff_initial_s=0.05, backoff_max_s=0.2, claim_timeout_s=60)


def shop_on_osmem(directory: Path, cluster: OsmemCluster, products: int) -> Pipeline:
    make_shop(directory, products, partition_size=products, page_size=PAGE, batch_size=PAGE)
    path = directory / "pipeline.yaml"
    text = path.read_text(encoding="utf-8").replace("  url: tantivy://index\n", f"  url: {cluster.opensearch_url}\n")
    path.write_text(text, encoding="utf-8")
    return load_pipeline(path)


def one_partition_of_small_batches(path: Path) -> Pipeline:
    """The shop's pipeline at *path* with one partition, read and written a page at a time."""
    text = path.read_text(encoding="utf-8")
    text = text.replace("    partition_size: 100\n", f"    partition_size: 100000\n    page_size: {PAGE}\n")
    text = text.replace("  batch_size: 25000\n", f"  batch_size: {PAGE}\n")
    path.write_text(text, encoding="utf-8")
    return load_pipeline(path)


def plan_job(
    pipeline: Pipeline, target: Target, catch_up: CatchUp | None = None
) -> tuple[CoordinationStore, str, str, dict[str, int]]:
    """What the driver does before its workers run: lock the alias (recording the fence in the
    target), create the version, record the log position a catch-up starts from, plan the
    partitions; returns (store, job id, index, fence). The store is the catch-up's when there is
    one; else it is opened here, and the caller closes it (``with store:``)."""
    with open_source_url(pipeline.source_url()) as source:
        plan, mapping = resolve_plans(pipeline, source, [ALIAS])[ALIAS]
        store = catch_up.store if catch_up is not None else open_store(pipeline)
        fence = {ALIAS: store.locks.acquire(ALIAS, "test-driver", 600)}
        target.observe_fence(ALIAS, fence[ALIAS])
        job = store.job_rows.create_job([ALIAS], {"aliases": [ALIAS]}, "test")
        index = target.create_version(ALIAS, mapping)
        store.job_rows.update_job(job.id, targets={ALIAS: index})
        if catch_up is not None:
            catch_up.record_start(job.id, {ALIAS: index})
        specs = plan_partitions(source, [EntityPlanInput(plan.config, plan.table, plan.id_columns)], pipeline.job)
    store.partition_rows.add_partitions(job.id, specs)
    store.job_rows.transition_job(job.id, JobStatus.READY, fence=fence)
    store.job_rows.transition_job(job.id, JobStatus.RUNNING, fence=fence)
    return store, job.id, index, fence


class DieOnceTheFirstBatchLanded(DocumentBuilder):
    """The real builder; asked for its second page (the first batch is then on its way to the
    target), it waits until that batch is in the index and kills its own process: the batch
    landed, its acknowledgement was never recorded."""

    target: Target
    index: str

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        if after is not None:
            wait_for(lambda: self.target.count(self.index) >= PAGE, 60, "the first batch to land")
            os.kill(os.getpid(), signal.SIGKILL)
        return super().page(rng, after, limit)


def worker_killed_after_its_first_bulk(pipeline_path: str, job_id: str, index: str, partition_id: str) -> None:
    """A worker process (spawned): runs the partition until its builder kills it."""
    pipeline = load_pipeline(Path(pipeline_path))
    with (
        open_source_url(pipeline.source_url()) as source,
        open_target(pipeline) as target,
        open_store(pipeline) as store,
    ):
        plan, _ = resolve_plans(pipeline, source, [ALIAS])[ALIAS]
        builder = DieOnceTheFirstBatchLanded(source, plan)
        builder.target, builder.index = target, index
        worker = PartitionWorker(store, target, lambda _: builder, job_id, RUN, {ALIAS: index}, settings())
        worker.run(partition_id, "doomed-worker")
    raise AssertionError("the worker should have been killed")


def kill_a_worker_after_its_first_bulk(pipeline: Pipeline, store: CoordinationStore, job_id: str, index: str) -> str:
    """Run the job's first partition in a worker process that is SIGKILLed after its first batch
    landed in the index and before it was acknowledged; return the partition's id."""
    part = store.partition_rows.partitions(job_id)[0]
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(
        target=worker_killed_after_its_first_bulk,
        args=(str(pipeline.base_dir / "pipeline.yaml"), job_id, index, part.id),
    )
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL, proc.exitcode
    left = store.partition_rows.partition(part.id)
    assert (left.status, left.cursor, left.success_count) == (P.PROCESSING, None, 0), "nothing was acknowledged"
    return part.id


def run_the_rest(pipeline: Pipeline, store: CoordinationStore, job_id: str, index: str, target: Target) -> None:
    """Every partition, as the rerun's workers would (the killed one is taken over by its retry)."""
    with open_source_url(pipeline.source_url()) as source:
        plan, _ = resolve_plans(pipeline, source, [ALIAS])[ALIAS]
        builder = make_builder(source, plan)
        worker = PartitionWorker(store, target, lambda _: builder, job_id, RUN, {ALIAS: index}, settings())
        for part in store.partition_rows.partitions(job_id):
            outcome = worker.run(part.id, "retry-worker")
            assert outcome.status == "completed", outcome


def test_a_row_deleted_after_its_unacknowledged_write_is_not_left_in_the_index(
    tmp_path: Path, osmem_cluster: OsmemCluster
) -> None:
    pipeline = shop_on_osmem(tmp_path, osmem_cluster, products=250)
    with open_target(pipeline) as target:
        store, job_id, index, fence = plan_job(pipeline, target)
        with store:
            assert len(store.partition_rows.partitions(job_id)) == 1

            pid = kill_a_worker_after_its_first_bulk(pipeline, store, job_id, index)
            landed = {doc_id for doc_id, _ in target.scan_hashes(index)}
            assert len(landed) == PAGE and "7" in landed
            assert store.write_ahead.entries(pid) == [(1, 1)], "the batch was recorded before it was sent"
            execute(tmp_path / "shop.db", "DELETE FROM products WHERE id = 7")  # before the redo reads it
            execute(tmp_path / "shop.db", "UPDATE products SET price = 9e999 WHERE id = 8")  # now unbuildable

            run_the_rest(pipeline, store, job_id, index, target)
            assert store.write_ahead.entries(pid) == [], "a complete partition keeps no entries"
            job = finalize_job(store, target, job_id, fence, {ALIAS: None}, keep_versions=2)

            assert job.status == JobStatus.COMPLETED_WITH_ERRORS, job.error_message  # row 8 is a dead letter
            assert target.alias_target(ALIAS) == index
            held = {doc_id for doc_id, _ in target.scan_hashes(index)}
            assert "7" not in held and "8" not in held
            assert len(held) == target.count(index) == 248
            with open_source_url(pipeline.source_url()) as source:
                plan, _ = resolve_plans(pipeline, source, [ALIAS])[ALIAS]
                report = verify_alias(source, target, plan)
            assert (report.missing, report.extra, report.stale, report.duplicates) == (1, 0, 0, 0), report.samples
            assert report.samples["missing"] == report.samples["unbuildable"] == ["8"]


def test_a_write_lost_after_its_acknowledgement_still_fails_the_count_check(
    tmp_path: Path, osmem_cluster: OsmemCluster
) -> None:
    """Held < acknowledged on an index written in place: the alias stays where it was."""
    pipeline = shop_on_osmem(tmp_path, osmem_cluster, products=250)
    with open_target(pipeline) as target:
        store, job_id, index, fence = plan_job(pipeline, target)
        with store:
            kill_a_worker_after_its_first_bulk(pipeline, store, job_id, index)
            run_the_rest(pipeline, store, job_id, index, target)
            assert target.count(index) == 250
            [result] = target.bulk(index, [BulkItem("9", op="delete")])  # acknowledged, then lost
            assert result.ok
            job = finalize_job(store, target, job_id, fence, {ALIAS: None}, keep_versions=2)

            assert job.status == JobStatus.FAILED
            assert f"{index} holds 249 documents but its partitions acknowledged 250" in (job.error_message or "")
            assert target.alias_target(ALIAS) is None


@pytest.mark.postgres
def test_with_a_catch_up_the_undone_write_and_the_replayed_delete_agree(
    tmp_path: Path, osmem_cluster: OsmemCluster, services: dict[str, str], spark: Any
) -> None:
    """A ``sync:`` section: the reindex records its log position before planning and replays what
    committed since after the count check. The row deleted between the dead attempt's write and
    the redo is deleted twice, by the redo and by the replay, and the job completes."""
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=250, target=osmem_cluster.opensearch_url)
    try:
        pipeline = one_partition_of_small_batches(shop.directory / "pipeline.yaml")
        with (
            open_target(pipeline) as target,
            open_source_url(pipeline.source_url()) as source,
            open_store(pipeline) as store_,
        ):
            catch_up = CatchUp(pipeline, source, store_, [ALIAS], lambda: spark, job_plans(pipeline, source))
            store, job_id, index, fence = plan_job(pipeline, target, catch_up)
            assert catch_up.active(job_id), "a sync section: the job catches up"
            assert len(store.partition_rows.partitions(job_id)) == 1

            kill_a_worker_after_its_first_bulk(pipeline, store, job_id, index)
            assert "7" in {doc_id for doc_id, _ in target.scan_hashes(index)}
            shop.sql("DELETE FROM reviews WHERE product_id = 7", "DELETE FROM products WHERE id = 7")
            run_the_rest(pipeline, store, job_id, index, target)
            job = finalize_job(store, target, job_id, fence, {ALIAS: None}, 2, catch_up)

            assert job.status == JobStatus.COMPLETED, job.error_message
            assert target.alias_target(ALIAS) == index
            [swap] = store.swap_log.attempts(ALIAS)  # the catch-up's hand-over swapped through finalize's swap
            assert (swap.index, swap.fence, swap.job_id, swap.outcome) == (index, fence[ALIAS], job_id, MOVED)
            report = shop.verify()
            assert report.clean and report.index_docs == 249, report.samples
    finally:
        drop_pg_shop(shop, services["postgres"])


def job_plans(pipeline: Any, source: Any) -> dict[str, Any]:
    """The plans the reindex resolves and hands its catch-up."""
    return {ALIAS: resolve_plans(pipeline, source, [ALIAS])[ALIAS][0]}
