"""Verify's ranges as one Spark job: one task and one Python worker process per range.

Like the reindex (:mod:`sparkindex.spark.partition_job`), a ``mapInArrow`` over the indexes of
the tasks: each worker runs :func:`run_range_task` on its range with the process's cached source,
target and builders, and returns one row holding a small JSON summary. Documents and ids never
reach the JVM or the driver. The pipeline travels inside the pickled function, never in Spark
options (secrets stay out of the UI and event logs).

The job runs on a thread while the calling thread reports progress from Spark's status tracker
(tasks completed of the job group); Ctrl-C cancels the job group.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from sparkindex.config.model import Pipeline
from sparkindex.documents.plan import IndexPlan
from sparkindex.spark.context import PlannedResources, worker_context
from sparkindex.spark.task_errors import classify, encode, raise_returned
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.ranges import RangeTask, TaskOptions, run_range_task

#: one row per range; ``error``: an error the task classified (spark/task_errors.py), as JSON
SUMMARY_SCHEMA = pa.schema([("task", pa.int64()), ("summary", pa.string()), ("error", pa.string())])
SUMMARY_DDL = "task long, summary string, error string"
POLL_S = 0.5


class VerifyTasks:
    """The task function: picklable, holding only plain values."""

    def __init__(
        self, wire: str, tasks: Sequence[RangeTask], options: TaskOptions, plans: Mapping[str, IndexPlan]
    ) -> None:
        self.wire = wire
        self.tasks = list(tasks)
        self.options = options
        self.plans = dict(plans)  # the driver's: a range is compared with the plan verify resolved
        self.key = f"verify-{uuid.uuid4().hex}"  # this run's plans, among the builders a worker caches

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = worker_context(self.wire)
        res = PlannedResources(ctx, ctx.shipped(self.plans, self.key))
        for batch in batches:
            for i in batch.column(0).to_pylist():
                try:
                    row = {"task": i, "summary": run_range_task(res, self.tasks[i], self.options).to_json()}
                except Exception as exc:
                    error = classify(exc)
                    if error is None:
                        raise  # unclassified: the task fails, as Spark reports it
                    row = {"task": i, "summary": None, "error": encode(error)}
                yield pa.RecordBatch.from_pylist([row], schema=SUMMARY_SCHEMA)


def verify_frame(
    spark: Any, pipeline: Pipeline, tasks: Sequence[RangeTask], options: TaskOptions, plans: Mapping[str, IndexPlan]
) -> Any:
    n = len(tasks)
    fn = VerifyTasks(pipeline.wire_string(), tasks, options, plans)
    return spark.range(0, n, 1, n).mapInArrow(fn, SUMMARY_DDL)


def _completed_tasks(sc: Any, group: str) -> int:
    tracker = sc.statusTracker()
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds if info is not None else ():
            stage = tracker.getStageInfo(stage_id)
            done += stage.numCompletedTasks if stage is not None else 0
    return done


def run_verify_tasks(
    spark: Any,
    pipeline: Pipeline,
    tasks: Sequence[RangeTask],
    options: TaskOptions,
    plans: Mapping[str, IndexPlan],
    on_progress: Callable[[int], None] | None = None,
) -> list[RangeSummary]:
    """Run *tasks* as one Spark job; one summary per task, in task order (raises if the job fails)."""
    if not tasks:
        return []
    sc = spark.sparkContext
    group = f"sparkindex-verify-{uuid.uuid4().hex[:12]}"
    result: Future[list[Any]] = Future()

    def collect() -> None:
        try:
            sc.setJobGroup(group, f"sparkindex verify ({len(tasks)} ranges)", True)
            result.set_result(verify_frame(spark, pipeline, tasks, options, plans).collect())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            result.set_exception(exc)

    thread = threading.Thread(target=collect, name="sparkindex-verify", daemon=True)
    thread.start()
    try:
        while True:
            try:
                rows = result.result(timeout=POLL_S)
                break
            except TimeoutError:
                if on_progress is not None:
                    on_progress(_completed_tasks(sc, group))
    except BaseException:
        sc.cancelJobGroup(group)
        raise
    if on_progress is not None:
        on_progress(len(tasks))
    raise_returned(rows)  # a task's error, as its own class
    summaries: list[RangeSummary | None] = [None] * len(tasks)
    for row in rows:
        summaries[row["task"]] = RangeSummary.from_json(row["summary"])
    missing = [i for i, s in enumerate(summaries) if s is None]
    if missing:
        raise RuntimeError(f"verify: Spark returned no summary for {len(missing)} of {len(tasks)} ranges")
    return [s for s in summaries if s is not None]
