"""A worker cut off from the store, but not from the target, must stop writing.

Its claim is only as good as its last heartbeat: once that is older than the job's
``claim_timeout_s`` another worker may take the partition over and write newer documents. A
worker that cannot renew must therefore stop writing well before then, even while its store calls
are still being rerun.

Real parts: PostgreSQL as source and store (the first worker reaches the store through a TCP
proxy the test stops), osmem-server (an OpenSearch TEST DOUBLE) behind the fault proxy as target.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import make_tables
from sparkindex.documents.builder import make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.resources import open_source_url, open_store_url, open_target_url
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.worker.partition import PartitionOutcome, PartitionWorker, WorkerSettings
from tests.coordination.proxy import TcpProxy
from tests.e2e.guarantee_helpers import pg_table
from tests.e2e.shop import wait_for
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import *  # noqa: F403 (the osmem, osmem_cluster and fault_proxy fixtures)
from tests.support.osmem import OsmemCluster, opensearch_url

P = PartitionStatus
ROWS = 20


@pytest.fixture
def prefix(services: dict[str, str]) -> Iterator[str]:
    """A table prefix of its own in the PostgreSQL store, dropped afterwards."""
    name = f"t{uuid.uuid4().hex[:8]}_"
    yield name
    engine = make_engine(services["postgres"])
    make_tables(name).metadata.drop_all(engine)
    engine.dispose()


def pipeline_over(directory: Path, pg: str, table: str, target_url: str, prefix: str) -> Pipeline:
    (directory / "pipeline.yaml").write_text(
        f"source:\n  url: {pg}\n"
        f"target:\n  url: {target_url}\n"
        f"coordination:\n  url: {pg}\n  prefix: {prefix}\n"
        f"indexes:\n  - alias: leased\n    table: {table}\n    partition_size: 100000\n    page_size: 1000\n",
        encoding="utf-8",
    )
    return load_pipeline(directory / "pipeline.yaml")


def docs(cluster: OsmemCluster, index: str) -> dict[str, str]:
    found = cluster.request("POST", f"/{index}/_search", {"size": 1000, "query": {"match_all": {}}})
    assert isinstance(found, dict)
    return {h["_id"]: h["_source"]["body"] for h in found["hits"]["hits"]}


@dataclass
class Rig:
    """One RUNNING job over one partition of ``ROWS`` rows of a fresh PostgreSQL table (body "old").

    Worker A reaches the store through ``store_proxy`` (stoppable) and the target through the fault
    proxy; worker B and the test reach both directly. Both belong to one run and take partitions as
    Spark's queue workers do (never another live worker's)."""

    pg: str
    table: str
    store: CoordinationStore
    store_proxy: TcpProxy
    index: str
    partition_id: str
    worker_a: PartitionWorker
    worker_b: PartitionWorker

    def run_a(self) -> tuple[threading.Thread, dict[str, PartitionOutcome]]:
        result: dict[str, PartitionOutcome] = {}

        def go() -> None:
            result["a"] = self.worker_a.run(self.partition_id, "worker-a", take_over_run=False)

        thread = threading.Thread(target=go, name="worker-a", daemon=True)
        thread.start()
        return thread, result

    def run_a_until_its_bulk_is_held(
        self, fault_proxy: HttpProxy
    ) -> tuple[threading.Thread, dict[str, PartitionOutcome]]:
        """Worker A reads every row and sends them in one bulk, which the network holds."""
        fault_proxy.hold_next(1, path="_bulk")
        started = self.run_a()
        wait_for(lambda: any("_bulk" in path for _, path in fault_proxy.requests), 30, "A's bulk to be held")
        return started

    def b_takes_over(self) -> PartitionOutcome:
        """Worker B's outcome, once it could claim the partition (A's lease ran out)."""
        taken: list[PartitionOutcome] = []

        def took_over() -> bool:
            out = self.worker_b.run(self.partition_id, "worker-b", take_over_run=False)
            if out.status != "skipped":
                taken.append(out)
            return bool(taken)

        wait_for(took_over, 60, "B to take the partition over", every=0.2)
        return taken[0]

    def set_body(self, body: str) -> None:
        engine = sa.create_engine(normalize_url(self.pg))
        with engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE {self.table} SET body = %s", (body,))
        engine.dispose()


@pytest.fixture
def rig(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    services: dict[str, str],
    osmem_cluster: OsmemCluster,
    fault_proxy: HttpProxy,
    prefix: str,
) -> Iterator[Rig]:
    claim_timeout_s = float(request.param)
    pg = services["postgres"]
    rows = [(i, "old") for i in range(1, ROWS + 1)]
    with (
        pg_table(pg, "id integer PRIMARY KEY, body text NOT NULL", rows, "lease") as table,
        contextlib.ExitStack() as opened,
    ):
        pipeline = pipeline_over(tmp_path, pg, table, opensearch_url(fault_proxy), prefix)
        target_a = opened.enter_context(open_target_url(pipeline.target.url, tmp_path))
        target_b = opened.enter_context(open_target_url(osmem_cluster.opensearch_url, tmp_path))
        source = opened.enter_context(open_source_url(pipeline.source_url()))
        plan, mapping = resolve_plans(pipeline, source, ["leased"])["leased"]
        store = opened.enter_context(open_store_url(pg, prefix))
        port = sa.make_url(pg).port or 5432
        store_proxy = TcpProxy("127.0.0.1", port)
        store_proxy.start()
        opened.callback(store_proxy.stop)
        store_a = opened.enter_context(open_store_url(pg.replace(f":{port}/", f":{store_proxy.port}/"), prefix))
        job = store.job_rows.create_job(["leased"], {"aliases": ["leased"]}, "test")
        index = target_b.create_version("leased", mapping)
        store.job_rows.update_job(job.id, targets={"leased": index})
        specs = plan_partitions(source, [EntityPlanInput(plan.config, plan.table, plan.id_columns)], pipeline.job)
        store.partition_rows.add_partitions(job.id, specs)
        store.job_rows.transition_job(job.id, JobStatus.READY)
        store.job_rows.transition_job(job.id, JobStatus.RUNNING)
        [part] = store.partition_rows.partitions(job.id)
        settings = WorkerSettings(
            batch_size=1000,
            retries=3,
            backoff_initial_s=0.05,
            backoff_max_s=0.2,
            claim_timeout_s=claim_timeout_s,
            max_in_flight=1,
        )
        builder_a = make_builder(opened.enter_context(open_source_url(pipeline.source_url())), plan)
        builder_b = make_builder(opened.enter_context(open_source_url(pipeline.source_url())), plan)
        aliases = {"leased": index}
        worker_a = PartitionWorker(store_a, target_a, lambda _: builder_a, job.id, "run-1", aliases, settings)
        worker_b = PartitionWorker(store, target_b, lambda _: builder_b, job.id, "run-1", aliases, settings)
        yield Rig(pg, table, store, store_proxy, index, part.id, worker_a, worker_b)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("rig", [3.0], indirect=True)  # claim_timeout_s
def test_a_worker_cut_off_from_the_store_writes_nothing_after_its_claim_could_have_expired(
    rig: Rig, osmem_cluster: OsmemCluster, fault_proxy: HttpProxy
) -> None:
    # A reads every row ("old") and sends them in one bulk, which the network holds.
    thread_a, result = rig.run_a_until_its_bulk_is_held(fault_proxy)

    # The rows change at the source; A is cut off from the store (not from the target).
    rig.set_body("new")
    rig.store_proxy.stop()

    # B takes the partition over once A's heartbeat is older than claim_timeout_s, and writes the
    # rows as they are now.
    outcome_b = rig.b_takes_over()
    assert outcome_b.status == "completed", outcome_b
    done = rig.store.partition_rows.partition(rig.partition_id)
    assert (done.status, done.owner) == (P.COMPLETED, "worker-b")
    assert set(docs(osmem_cluster, rig.index).values()) == {"new"}

    # A's held bulk is answered now (502, transient); A would retry it.
    fault_proxy.state.release.set()
    wait_for(lambda: bool(fault_proxy.bulks) or not thread_a.is_alive(), 60, "A to retry or give up")
    rig.store_proxy.start()  # let A reach the store again, so that it ends
    thread_a.join(timeout=120)
    assert not thread_a.is_alive()

    written_by_a = [b.ids for b in fault_proxy.bulks]
    assert written_by_a == [], f"A wrote {written_by_a} after its claim could have been taken over"
    assert set(docs(osmem_cluster, rig.index).values()) == {"new"}, "older documents overwrote newer ones"
    assert result["a"].status == "lost", result
    assert rig.store.partition_rows.partition(rig.partition_id).status == P.COMPLETED


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("rig", [6.0], indirect=True)  # claim_timeout_s: renewals every second
def test_a_worker_whose_store_refuses_connections_for_a_moment_renews_again_and_finishes(
    rig: Rig, osmem_cluster: OsmemCluster, fault_proxy: HttpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease thread survives a store that refuses its connections (PostgreSQL's direct
    connection path raised the driver's own error, which killed it), renews as soon as the store
    is back, and the worker, whose claim never lapsed, finishes the partition."""
    caplog.set_level(logging.WARNING, logger="sparkindex.worker.partition")
    thread_a, result = rig.run_a_until_its_bulk_is_held(fault_proxy)

    cut_at = time.time()
    rig.store_proxy.stop()
    wait_for(lambda: any("lease renewal" in r.getMessage() for r in caplog.records), 30, "a lease renewal to fail")
    rig.store_proxy.start()

    def renewed_after_the_cut() -> bool:
        beat = rig.store.partition_rows.partition(rig.partition_id).last_heartbeat
        return beat is not None and beat > cut_at

    wait_for(renewed_after_the_cut, 20, "the lease to be renewed once the store is back")
    fault_proxy.state.release.set()  # A's bulk: 502, then retried while the claim is proven
    thread_a.join(timeout=60)
    assert not thread_a.is_alive()
    assert result["a"].status == "completed", result
    done = rig.store.partition_rows.partition(rig.partition_id)
    assert (done.status, done.claims, done.success_count) == (P.COMPLETED, 1, ROWS)
    assert set(docs(osmem_cluster, rig.index).values()) == {"old"} and len(docs(osmem_cluster, rig.index)) == ROWS


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("rig", [3.0], indirect=True)  # claim_timeout_s
def test_a_worker_that_cannot_record_its_outcome_ends_normally_and_leaves_the_claim_to_expire(
    rig: Rig, osmem_cluster: OsmemCluster, fault_proxy: HttpProxy
) -> None:
    """The target stays busy (503) beyond the retries, so the worker parks the partition; the
    store is unreachable at that moment. The store's error must not escape the worker on top of
    the target's (a Spark task failing with a traceback): the claim is left to expire, cursor
    kept, and another worker finishes the partition."""
    thread_a, result = rig.run_a_until_its_bulk_is_held(fault_proxy)
    rig.store_proxy.stop()
    fault_proxy.fail_next(503, count=1000, path="_bulk")
    fault_proxy.state.release.set()  # the held bulk: 502; its retries: 503
    thread_a.join(timeout=120)
    assert not thread_a.is_alive()
    assert "a" in result, "the worker raised instead of returning an outcome"
    assert result["a"].status == "lost", result
    assert rig.store.partition_rows.partition(rig.partition_id).status == P.PROCESSING  # left to expire

    rig.store_proxy.start()
    outcome_b = rig.b_takes_over()
    assert outcome_b.status == "completed", outcome_b
    assert len(docs(osmem_cluster, rig.index)) == ROWS
