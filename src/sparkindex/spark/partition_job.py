"""Running a job's partitions on Spark: one task per partition, one Python process per task.

The tasks are a ``mapInArrow`` over the indexes of the partitions to run: each task's Python
worker reads, builds and writes its partition through :class:`PartitionWorker` and returns one
summary row. Documents never cross into the JVM or between processes, and Spark keeps what it is
good at: scheduling the tasks over executors and retrying failed ones.

The pipeline travels inside the pickled task function, never in Spark options, so its secrets
do not show in the Spark UI, the event logs or plan descriptions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from sparkindex.config.model import Pipeline
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

    def __init__(self, wire: str, job_id: str, run_id: str, partition_ids: Sequence[str]) -> None:
        self.wire = wire
        self.job_id = job_id
        self.run_id = run_id
        self.partition_ids = list(partition_ids)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = worker_context(self.wire)
        worker = ctx.partition_worker(self.job_id, self.run_id)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                pid = self.partition_ids[i]
                outcome = worker.run(pid, task_identity(self.run_id))
                yield pa.RecordBatch.from_pylist([asdict(outcome)], schema=SUMMARY_SCHEMA)


def partitions_frame(spark: Any, pipeline: Pipeline, job_id: str, run_id: str, partition_ids: Sequence[str]) -> Any:
    """The pass as a DataFrame: one row per partition id, one Spark partition (task) per row."""
    n = len(partition_ids)
    fn = PartitionTasks(pipeline.wire_string(), job_id, run_id, partition_ids)
    return spark.range(0, n, 1, n).mapInArrow(fn, SUMMARY_DDL)


def run_partitions(
    spark: Any, pipeline: Pipeline, job_id: str, run_id: str, partition_ids: Sequence[str]
) -> list[PartitionOutcome]:
    """Run *partition_ids* as one Spark job; return each task's outcome (raises if the job fails)."""
    if not partition_ids:
        return []
    rows = partitions_frame(spark, pipeline, job_id, run_id, partition_ids).collect()
    return [PartitionOutcome(**row.asDict()) for row in rows]
