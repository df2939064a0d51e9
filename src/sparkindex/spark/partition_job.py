"""Running a job's partitions on Spark: one task per slot, each a queue worker, one Python
process per task.

The tasks are a ``mapInArrow`` over one row per slot (the cluster's default parallelism, at most
one per partition). Each task's Python worker takes the job's claimable partitions in claim order,
one at a time, reads, builds and writes each through :class:`PartitionWorker`, and returns a
summary row per partition it ran. Documents never cross into the JVM or between processes. One
task per partition cost a Spark task launch between partitions (a third of a second here, a
tenth of a partition's time); a queue also balances itself: a fast slot simply claims more.
Workers of one run never take each other's partitions (``take_over_run=False``); what a dead
one held is released when the pass ends and the next pass runs it. A partition that failed
during the pass waits for the next pass too, rather than being retried at once by every slot.

The pipeline travels inside the pickled task function, never in Spark options, so its secrets
do not show in the Spark UI, the event logs or plan descriptions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from sparkindex.config.model import Pipeline
from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.recovery import run_holds_its_locks
from sparkindex.coordination.states import JobStatus
from sparkindex.documents.plan import IndexPlan
from sparkindex.spark.context import task_identity, worker_context
from sparkindex.worker.partition import PartitionOutcome

log = logging.getLogger(__name__)

SUMMARY_SCHEMA = pa.schema(
    [
        ("partition_id", pa.string()),
        ("entity", pa.string()),
        ("status", pa.string()),
        ("indexed", pa.int64()),
        ("failed", pa.int64()),
        ("seconds", pa.float64()),
        ("error", pa.string()),
    ]
)
SUMMARY_DDL = (
    "partition_id string, entity string, status string, indexed long, failed long, seconds double, error string"
)


class PartitionTasks:
    """The task function: picklable, holding only plain values."""

    def __init__(
        self,
        wire: str,
        job_id: str,
        run_id: str,
        retries: dict[str, int],
        plans: Mapping[str, IndexPlan],
        fingerprint: str,
    ) -> None:
        self.wire = wire
        self.job_id = job_id
        self.run_id = run_id
        self.retries = retries  # the pass's partitions and their retry counts when it began
        self.plans = dict(plans)  # resolved once by the driver: workers build from these, not the schema
        self.fingerprint = fingerprint

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:  # the slot's row: its only use is to start this task
            pass
        ctx = worker_context(self.wire)
        # keyed by job and plan: two jobs of one fingerprint (a rerun after a type change) never share
        worker = ctx.partition_worker(self.job_id, self.run_id, self.plans, f"{self.job_id}:{self.fingerprint}")
        owner = task_identity(self.run_id)
        for pid in claim_queue(ctx.store, self.job_id, self.run_id, self.retries, list(self.plans)):
            outcome = worker.run(pid, owner, take_over_run=False)
            if outcome.status != "skipped":
                yield pa.RecordBatch.from_pylist([asdict(outcome)], schema=SUMMARY_SCHEMA)
            if outcome.status == "lost":
                return  # another driver runs the job now (or this pass was given up): stop taking work


def claim_queue(
    store: Any, job_id: str, run_id: str, retries: dict[str, int], aliases: Sequence[str], window: int = 8
) -> Iterator[str]:
    """The pass's partitions that are claimable now, in claim order, read again after each one
    (others take partitions meanwhile). Ends when none is left, when the job is stopping or run
    by another driver, or when the run no longer holds the lock of one of its *aliases* (a worker
    of a cancelled pass must not go on: it claimed on for seconds after a lost lock, and what
    Spark then killed mid-way stayed claimed), and skips a partition that failed since the pass
    began (the next pass retries it, after the backoff of a pass)."""
    tried: set[str] = set()
    while True:
        job = store.job_rows.job(job_id)
        if job.status == JobStatus.STOPPING or (job.run_id is not None and job.run_id != run_id):
            return
        if not run_holds_its_locks(store, aliases, run_id):
            return
        ahead = store.partition_rows.claimable(job_id, limit=window + len(tried))
        fresh = [p.id for p in ahead if p.id in retries and p.retry_count <= retries[p.id] and p.id not in tried]
        if not fresh:
            return
        tried.intersection_update(p.id for p in ahead)  # only what is still claimable can come again
        tried.add(fresh[0])  # once per task: claimed (and run), or held by another worker now
        yield fresh[0]


def partitions_frame(
    spark: Any,
    pipeline: Pipeline,
    job_id: str,
    run_id: str,
    partitions: Sequence[PartitionRecord],
    plans: Mapping[str, IndexPlan],
    fingerprint: str,
) -> Any:
    """The pass as a DataFrame: one row per slot, one Spark task per row. On a cluster, one per
    partition: executors may still be registering when the pass starts (and dynamic allocation
    grows with the tasks asked for); tasks beyond the work find the queue empty and end."""
    local = str(spark.sparkContext.master).startswith("local")
    slots = int(spark.sparkContext.defaultParallelism) if local else len(partitions)
    slots = max(1, min(len(partitions), slots))
    retries = {p.id: p.retry_count for p in partitions}
    fn = PartitionTasks(pipeline.wire_string(), job_id, run_id, retries, plans, fingerprint)
    return spark.range(0, slots, 1, slots).mapInArrow(fn, SUMMARY_DDL)


def run_partitions(
    spark: Any,
    pipeline: Pipeline,
    job_id: str,
    run_id: str,
    partitions: Sequence[PartitionRecord],
    plans: Mapping[str, IndexPlan],
    fingerprint: str,
) -> list[PartitionOutcome]:
    """Run *partitions* as one Spark job; return the outcome of each partition a task ran
    (raises if the job fails)."""
    if not partitions:
        return []
    rows = partitions_frame(spark, pipeline, job_id, run_id, partitions, plans, fingerprint).collect()
    return [PartitionOutcome(**row.asDict()) for row in rows]
