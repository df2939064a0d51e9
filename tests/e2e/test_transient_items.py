"""Items the target keeps rejecting as transient are retried later, never written off.

A 429 (es_rejected_execution_exception) or a 503 on one item says "not now", not "never": when an
item is still rejected that way after every retry, its partition is parked (CLOSED, cursor kept)
and retried when it reopens or by a rerun, instead of being recorded as a dead letter. Items the
target refuses for good (a mapper_parsing_exception) remain dead letters.

The target is osmem-server, an OpenSearch TEST DOUBLE, behind the fault proxy (which takes the
rejected items out of the request it forwards, as a real rejection leaves them unapplied); the
mapping rejection is osmem's own.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.documents.builder import make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.resources import open_source_url, open_store, open_target_url
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.worker.partition import PartitionOutcome, PartitionWorker, WorkerSettings
from tests.e2e.shop import wait_for
from tests.e2e.test_opensearch_shop import run
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import *  # noqa: F403 (the osmem, osmem_cluster and fault_proxy fixtures)
from tests.support.osmem import OsmemCluster, opensearch_url

P = PartitionStatus
ROWS = 20
RETRIES = 2
#: its item is rejected with 429 one time more than a bulk's first try and its retries
BUSY = "7"
#: its `qty` is text where the mapping wants a long: osmem refuses it for good
UNBUILDABLE = "3"


def items_pipeline(directory: Path, target_url: str, job_yaml: str = "") -> Pipeline:
    """``items(id, body, qty)``, ROWS rows, in SQLite; ``qty`` is NULL but in UNBUILDABLE."""
    conn = sqlite3.connect(directory / "items.db")
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, body TEXT NOT NULL, qty TEXT)")
    conn.executemany("INSERT INTO items VALUES (?, ?, NULL)", [(i, f"item {i}") for i in range(1, ROWS + 1)])
    conn.execute("UPDATE items SET qty = 'three, not 3' WHERE id = ?", (int(UNBUILDABLE),))
    conn.commit()
    conn.close()
    (directory / "pipeline.yaml").write_text(
        "source:\n  url: sqlite:///items.db\n"
        f"target:\n  url: {target_url}\n"
        "spark:\n  master: local[2,4]\n"
        "indexes:\n  - alias: items\n    table: items\n    partition_size: 10\n    page_size: 5\n"
        "    mapping:\n      properties:\n        qty: {type: long}\n"
        f"job:\n  batch_size: 5\n  retries: {RETRIES}\n  backoff_initial_s: 0.01\n  backoff_max_s: 0.05\n{job_yaml}",
        encoding="utf-8",
    )
    return load_pipeline(directory / "pipeline.yaml")


def ids(cluster: OsmemCluster, index: str) -> set[str]:
    found = cluster.request("POST", f"/{index}/_search", {"size": 1000, "query": {"match_all": {}}})
    assert isinstance(found, dict)
    return {h["_id"] for h in found["hits"]["hits"]}


@pytest.mark.slow
def test_an_item_still_rejected_after_every_retry_parks_its_partition_and_is_written_when_it_reopens(
    tmp_path: Path, osmem_cluster: OsmemCluster, fault_proxy: HttpProxy
) -> None:
    pipeline = items_pipeline(tmp_path, opensearch_url(fault_proxy))
    with (
        open_source_url(pipeline.source_url()) as source,
        open_target_url(pipeline.target.url, tmp_path) as target,
        open_store(pipeline) as store,
    ):
        plan, mapping = resolve_plans(pipeline, source, ["items"])["items"]
        job = store.job_rows.create_job(["items"], {"aliases": ["items"]}, "test")
        index = target.create_version("items", mapping)
        store.job_rows.update_job(job.id, targets={"items": index})
        specs = plan_partitions(source, [EntityPlanInput(plan.config, plan.table, plan.id_columns)], pipeline.job)
        store.partition_rows.add_partitions(job.id, specs)
        store.job_rows.transition_job(job.id, JobStatus.READY)
        store.job_rows.transition_job(job.id, JobStatus.RUNNING)
        first = min(store.partition_rows.partitions(job.id), key=lambda p: p.partition_index)  # rows 1..10
        builder = make_builder(source, plan)
        settings = WorkerSettings(
            batch_size=5,
            retries=RETRIES,
            backoff_initial_s=0.01,
            backoff_max_s=0.05,
            reopen_after_s=0.5,
            max_in_flight=1,  # each batch acknowledged before the next one is written
        )
        worker = PartitionWorker(store, target, lambda _: builder, job.id, "run-1", {"items": index}, settings)

        fault_proxy.reject_items([BUSY], status=429, times=RETRIES + 1)
        outcome = worker.run(first.id, "test:worker")

        assert fault_proxy.state.reject[BUSY] == [], "the busy item was offered on every try"
        letters = {d.doc_id: d.error_class for d in store.dead_letters.list(job_id=job.id)}
        assert BUSY not in letters, f"a transient rejection was written off as a dead letter: {letters}"
        assert letters == {UNBUILDABLE: "mapper_parsing_exception"}, "a permanent rejection stays a dead letter"
        assert outcome.status == "closed", outcome
        parked = store.partition_rows.partition(first.id)
        assert parked.status == P.CLOSED and parked.retry_count == 0
        assert parked.cursor == (5,), "the cursor stays after the last batch whose every item was written"
        assert BUSY in (parked.last_error or "") and "429" in (parked.last_error or "")

        # Once it reopens, the partition is taken again from its cursor: the busy item is written now.
        again: list[PartitionOutcome] = []

        def reopened_and_run() -> bool:
            out = worker.run(first.id, "test:worker")
            if out.status != "skipped":
                again.append(out)
            return bool(again)

        wait_for(reopened_and_run, 30, "the parked partition to reopen", every=0.1)
        assert again[0].status == "completed", again
        done = store.partition_rows.partition(first.id)
        assert (done.status, done.success_count, done.failed_count) == (P.COMPLETED, 9, 1)
        letters = {d.doc_id: d.error_class for d in store.dead_letters.list(job_id=job.id)}
        assert letters == {UNBUILDABLE: "mapper_parsing_exception"}
        assert ids(osmem_cluster, index) == {str(i) for i in range(1, 11)} - {UNBUILDABLE}


@pytest.mark.slow
def test_a_reindex_whose_item_stays_rejected_fails_without_dead_letters_and_its_rerun_indexes_it(
    tmp_path: Path, cli: Path, osmem_cluster: OsmemCluster, fault_proxy: HttpProxy
) -> None:
    pipeline_path = tmp_path / "pipeline.yaml"
    items_pipeline(tmp_path, opensearch_url(fault_proxy), "  max_passes: 1\n  reopen_after_s: 1\n")
    sqlite = sqlite3.connect(tmp_path / "items.db")
    sqlite.execute("UPDATE items SET qty = NULL")  # every row buildable: the index must equal the source
    sqlite.commit()
    sqlite.close()

    fault_proxy.reject_items([BUSY], status=429, times=1000)  # busy for the whole first run
    code, summary, err = run(cli, "reindex", "-c", str(pipeline_path))
    assert summary["status"] == "FAILED", (summary, err[-3000:])
    assert code != 0
    _, dlq, _ = run(cli, "dlq", "list", "-c", str(pipeline_path))
    assert dlq["dead_letters"] == [], "a transient rejection was written off as a dead letter"
    with open_store(load_pipeline(pipeline_path)) as store:
        statuses = sorted(p.status for p in store.partition_rows.partitions(store.job_rows.jobs()[0].id))
    assert statuses == [P.CLOSED, P.COMPLETED], statuses

    fault_proxy.reject_items([BUSY], status=429, times=0)  # the target has room again
    code, summary, err = run(cli, "reindex", "-c", str(pipeline_path))
    assert (code, summary["status"], summary["failed"]) == (0, "COMPLETED", 0), (summary, err[-3000:])
    _, dlq, _ = run(cli, "dlq", "list", "-c", str(pipeline_path))
    assert dlq["dead_letters"] == []
    code, report, _ = run(cli, "verify", "-c", str(pipeline_path), timeout=300)
    counts: dict[str, Any] = {k: report[k] for k in ("missing", "extra", "stale", "duplicates")}
    assert code == 0 and counts == {"missing": 0, "extra": 0, "stale": 0, "duplicates": 0}, report
    assert ids(osmem_cluster, "items") == {str(i) for i in range(1, ROWS + 1)}
