"""The driver on real Spark: a failed pass leaves no partition behind, a lost lock stops the Spark
job at once, and pipeline secrets never reach Spark's configuration, plans or UI data."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkindex.coordination.records import EntityStats
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import LockLost, UsageError
from sparkindex.jobs.control import request_stop
from sparkindex.jobs.reindex import ReindexJob, ReindexSummary
from sparkindex.resources import open_source_url, open_store, open_target
from sparkindex.spark.partition_job import partitions_frame
from sparkindex.verify.local import verify_alias
from tests.e2e.guarantee_helpers import pg_table, write_pipeline
from tests.e2e.shop import make_shop, wait_for

pytestmark = pytest.mark.slow
P = PartitionStatus


class Phases:
    """A progress listener that records the driver's phases."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def phase(self, text: str) -> None:
        self.seen.append(text)

    def stats(self, stats: dict[str, EntityStats]) -> None:
        return None


def start(job: ReindexJob) -> tuple[threading.Thread, dict[str, Any]]:
    """``job.run()`` on a thread; its summary or exception lands in the returned dict."""
    result: dict[str, Any] = {}

    def go() -> None:
        try:
            result["summary"] = job.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result["error"] = exc
        result["ended"] = time.monotonic()

    thread = threading.Thread(target=go, name="reindex-driver", daemon=True)
    thread.start()
    return thread, result


def partitions_where(store: Any, predicate: Callable[[list[Any]], bool]) -> Callable[[], bool]:
    def check() -> bool:
        jobs = store.job_rows.jobs(["products"])
        return bool(jobs) and predicate(store.partition_rows.partitions(jobs[0].id))

    return check


# -- a failed pass -------------------------------------------------------------------------------------
def test_partitions_left_processing_by_a_failed_pass_are_retried_by_the_next_pass(tmp_path: Path, spark: Any) -> None:
    # Long partitions of small batches: one cut off early in pass 1 cannot finish on its own. Each
    # batch is sealed and acknowledged alone (sync_every_s far under a batch's time), so progress
    # moves by 50 at a time on any machine: with 0.05 s a fast one acknowledged 550 at once, past
    # the window below, and the wait never saw it (CI on 0060dc3).
    pipeline = make_shop(tmp_path, products=8000, partition_size=2000, page_size=50, batch_size=50, sync_every_s=0.001)
    with open_store(pipeline) as store:
        phases = Phases()
        job = ReindexJob(pipeline, progress=phases, spark_factory=lambda: spark)
        thread, result = start(job)
        cut: dict[str, Any] = {}
        try:

            def one_done_one_just_started(parts: list[Any]) -> bool:
                if not thread.is_alive():  # the window can no longer come: say why at once
                    states = [(p.status, p.success_count) for p in parts]
                    raise AssertionError(f"pass 1 ended before the cut: {result} {states}")
                early = [p for p in parts if p.status == P.PROCESSING and 0 < p.success_count <= p.estimated_count // 4]
                if any(p.status == P.COMPLETED for p in parts) and early and early[0].owner:
                    cut.update(
                        victim=early[0].id, owner=early[0].owner, done={p.id for p in parts if p.status == P.COMPLETED}
                    )
                    return True
                return False

            wait_for(partitions_where(store, one_done_one_just_started), 300, "a partition done and one just started")
            spark.sparkContext.cancelJobGroup(job.job_group)  # pass 1's Spark job fails under its tasks
            # A cancelled task's Python worker runs on until it next talks to the JVM (at the end of its
            # partition); the one holding the victim is killed, so the victim really is left PROCESSING.
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(cut["owner"].split(":")[1]), signal.SIGKILL)  # owner: host:pid:run:task
        finally:
            thread.join(timeout=600)
        assert "error" not in result, result.get("error")
        summary: ReindexSummary = result["summary"]
        assert summary.status == "COMPLETED", store.job_rows.job(summary.job_id).error_message
        assert summary.indexed == summary.source_rows == 8000
        assert any(t.startswith("pass 1 failed") for t in phases.seen), phases.seen
        assert any(t.startswith("pass 2:") for t in phases.seen), phases.seen
        parts = {p.id: p for p in store.partition_rows.partitions(summary.job_id)}
        assert all(p.status == P.COMPLETED for p in parts.values())
        assert sum(p.success_count for p in parts.values()) == 8000, "acknowledged work counted once"
        victim = parts[cut["victim"]]
        assert victim.claims >= 2, "the partition cut off in pass 1 was claimed again by pass 2"
        assert victim.retry_count == 0, "a failed pass is not the partition's failure"
        assert all(parts[pid].claims == 1 for pid in cut["done"]), "completed partitions are never redone"
        with open_source_url(pipeline.source_url()) as source, open_target(pipeline) as target:
            plan, _ = resolve_plans(pipeline, source, ["products"])["products"]
            report = verify_alias(source, target, plan)
        assert (report.missing, report.extra, report.stale, report.duplicates, report.index_docs) == (0, 0, 0, 0, 8000)


# -- a lost lock -------------------------------------------------------------------------------------
def test_a_lost_lock_aborts_the_spark_job(tmp_path: Path, spark: Any) -> None:
    # 96 partitions, so that the job cannot look finished by the time the driver ends. A cancelled
    # pass's Python workers run on by themselves until Spark kills them 2-4 s later
    # (spark.python.task.killTimeout, a wall-clock time); they used to claim and complete more
    # partitions meanwhile (up to 5 more of 24 here; 5x faster they could all), because claim_queue
    # ended only on STOPPING or a new run_id and the thief set neither. It now also ends once the
    # run no longer holds the lock: at most one claim per task can pass its check at the steal.
    pipeline = make_shop(
        tmp_path,
        products=48_000,
        partition_size=500,
        page_size=100,
        batch_size=100,
        extra_yaml="  lock_ttl_s: 2.0\n  lock_refresh_s: 0.2\n",
    )
    with open_store(pipeline) as store, open_target(pipeline) as target:
        job = ReindexJob(pipeline, spark_factory=lambda: spark)
        tracker = spark.sparkContext.statusTracker()

        def tasks_running() -> int:
            """The driver's Spark tasks still running (a cancelled job's included, until they end)."""
            jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(job.job_group)]
            stages = [tracker.getStageInfo(s) for info in jobs if info is not None for s in info.stageIds]
            return sum(stage.numActiveTasks for stage in stages if stage is not None)

        thread, result = start(job)
        body_passed = False
        try:

            def one_done() -> bool:
                alive = thread.is_alive()
                jobs = store.job_rows.jobs(["products"])
                parts = store.partition_rows.partitions(jobs[0].id) if jobs else []
                if not alive:  # the lock can no longer be taken mid-job: say why at once
                    states = [str(p.status) for p in parts]
                    counts = {state: states.count(state) for state in sorted(set(states))}
                    raise AssertionError(f"the driver ended before the lock was taken: {result} {counts}")
                return any(p.status == P.COMPLETED for p in parts)

            wait_for(one_done, 300, "a partition done")
            stolen_at = time.monotonic()
            thief = store.locks.acquire("products", "thief", 60.0, holder_is_dead=lambda _: True)
            jid = store.job_rows.jobs(["products"])[0].id
            unclaimed = {p.id for p in store.partition_rows.partitions(jid) if p.claims == 0}  # when the lock was taken
            thread.join(timeout=60)
            assert not thread.is_alive(), "the driver kept running after its lock was taken"
            parts = store.partition_rows.partitions(jid)  # what the job had done when its driver ended
            status = store.job_rows.job(jid).status
            body_passed = True
        finally:
            thread.join(timeout=600)
            # The cancelled pass's workers are still at it: stop them as `sparkindex stop` asks a job
            # (claim_queue ends, a partition in hand is released), so that none runs on into the next
            # test on this Spark session; none is left once no task of the driver's runs.
            with contextlib.suppress(UsageError):  # no job running (any more): nothing to stop
                request_stop(store, ["products"])
            try:
                wait_for(lambda: tasks_running() == 0, 120, "the cancelled pass's tasks to end")
            except AssertionError:
                if body_passed:  # otherwise the body's own failure is the one to see
                    raise
        claimed_after = [p.id for p in store.partition_rows.partitions(jid) if p.id in unclaimed and p.claims > 0]
        slots = int(spark.sparkContext.defaultParallelism)
        assert len(claimed_after) <= slots + 1, f"{len(claimed_after)} partitions claimed after the lock was lost"
        error = result.get("error")
        summary = result.get("summary")
        assert isinstance(error, LockLost) or (summary is not None and summary.status != "COMPLETED"), result
        assert result["ended"] - stolen_at < 20, "the loss must stop the job promptly, not at its end"
        done = sum(p.status == P.COMPLETED for p in parts)
        assert done < len(parts), f"the job ran to its end despite the lost lock ({done} of {len(parts)} partitions)"
        assert status not in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS), status
        assert target.alias_target("products") is None, "a driver without its lock moved the alias"
        lock = store.locks.get("products")
        assert lock is not None and (lock.holder, lock.token) == ("thief", thief)

        spark_jobs = tracker.getJobIdsForGroup(job.job_group)
        assert spark_jobs, "the driver ran its passes in its job group"

        def group_idle() -> bool:
            infos = [tracker.getJobInfo(j) for j in spark_jobs]
            return all(i is None or i.status != "RUNNING" for i in infos)

        wait_for(group_idle, 30, "the driver's Spark jobs to end")
        statuses = {tracker.getJobInfo(j).status for j in spark_jobs if tracker.getJobInfo(j) is not None}
        # cancelled (FAILED), or ended by itself: its tasks stop claiming once the run's lock is gone,
        # and a steal between one claim and the next can let every task end before the keeper's
        # cancel lands. That it did not run to the job's end is asserted above.
        assert statuses <= {"FAILED", "SUCCEEDED"}, f"the driver's Spark jobs did not end: {statuses}"


# -- secrets -----------------------------------------------------------------------------------------
PASSWORD = "S3cretPW"


@pytest.mark.postgres
def test_secrets_never_reach_spark(tmp_path: Path, spark: Any, services: dict[str, str]) -> None:
    url = f"postgresql://sparkindex:{PASSWORD}@127.0.0.1:55432/sparkindex"  # trust auth accepts any password
    rows = [(i, f"item {i}") for i in range(1, 201)]
    with pg_table(services["postgres"], "id integer PRIMARY KEY, name text NOT NULL", rows, "secret") as table:
        pipeline = write_pipeline(tmp_path, url, "items", table, "    partition_size: 50\n")
        assert PASSWORD in pipeline.wire_string(), "the test must carry the secret into the job"
        summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert summary.status == "COMPLETED" and summary.indexed == 200

        # The DataFrame a pass runs, built as run_partitions builds it (it collects at once).
        with open_store(pipeline) as store:
            df = partitions_frame(
                spark, pipeline, summary.job_id, "probe", store.partition_rows.partitions(summary.job_id), {}, "fp"
            )
            plan_text = df._jdf.queryExecution().toString()
            assert "MapInArrow" in plan_text or "mapInArrow" in plan_text.lower(), plan_text
            assert PASSWORD not in plan_text

    conf = spark.sparkContext.getConf().getAll()
    assert not [(k, v) for k, v in conf if PASSWORD in k or PASSWORD in v]
    # What the Spark UI and the event log show of every SQL execution (the job's passes included).
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    seen = 0
    for i in range(executions.size()):
        e = executions.apply(i)
        seen += "MapInArrow" in e.physicalPlanDescription()
        for text in (e.description(), e.details(), e.physicalPlanDescription()):
            assert PASSWORD not in text
    assert seen >= 1, "the job's passes must be among the executions checked"
