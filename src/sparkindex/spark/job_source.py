"""``sparkindex_job``: a Spark batch source whose partitions are a job's pending partitions.

Each task claims its partition in the coordination store, resumes from the stored cursor, reads
keyset pages, builds documents and yields them as Arrow batches (one per page) for the writer.
It never moves the cursor itself: only the writer knows what the target acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.documents.builder import Page
from sparkindex.errors import TransientError
from sparkindex.retry import Backoff, retry_transient
from sparkindex.sources.base import KeyRange
from sparkindex.spark.context import WorkerContext, task_identity, worker_context
from sparkindex.spark.rows import ARROW_SCHEMA, SCHEMA_DDL, Kind

log = logging.getLogger(__name__)

STOP_CHECK_INTERVAL_S = 2.0


class JobInputPartition(InputPartition):
    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


class JobPartitionsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparkindex_job"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return JobPartitionsReader(dict(self.options))


def _control(rec: PartitionRecord, kind: Kind, cursor: str | None = None, error: str | None = None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "pid": [rec.id],
            "token": [rec.claim_token],
            "entity": [rec.entity],
            "kind": [int(kind)],
            "doc_id": [None],
            "source": [None],
            "hash": [None],
            "cursor": [cursor],
            "error": [error],
        },
        schema=ARROW_SCHEMA,
    )


class JobPartitionsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.wire = options["pipeline"]
        self.job_id = options["job_id"]
        self.run_id = options["run_id"]

    def partitions(self) -> list[JobInputPartition]:
        ctx = worker_context(self.wire)
        todo = ctx.store.partitions(self.job_id, [PartitionStatus.PENDING, PartitionStatus.CLOSED])
        return [JobInputPartition(p.id) for p in todo]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, JobInputPartition)
        ctx = worker_context(self.wire)
        job = ctx.pipeline.job
        if ctx.store.job(self.job_id).status == JobStatus.STOPPING:
            return  # stopping: leave the partition PENDING, unclaimed
        rec = ctx.store.claim(partition.pid, task_identity(self.run_id), self.run_id, job.claim_timeout_s)
        if rec is None:
            return  # finished, or a live process elsewhere holds it
        yield from PartitionReadTask(ctx, rec, self.job_id).run()


class PartitionReadTask:
    def __init__(self, ctx: WorkerContext, rec: PartitionRecord, job_id: str) -> None:
        self.ctx = ctx
        self.rec = rec
        self.job_id = job_id
        self.builder = ctx.builder(rec.entity)
        self._next_stop_check = 0.0

    def _stopping(self) -> bool:
        now = time.monotonic()
        if now < self._next_stop_check:
            return False
        self._next_stop_check = now + STOP_CHECK_INTERVAL_S
        return self.ctx.store.job(self.job_id).status == JobStatus.STOPPING

    def run(self) -> Iterator[pa.RecordBatch]:
        rec, builder, job = self.rec, self.builder, self.ctx.pipeline.job
        plan = builder.plan
        rng = KeyRange(rec.range_start, rec.range_end)
        after = rec.cursor
        page_size = plan.config.page_size
        while True:
            if self._stopping():
                yield _control(rec, Kind.RELEASED)
                return
            try:
                page = retry_transient(
                    lambda start=after: self._page(rng, start, page_size),  # type: ignore[misc]
                    f"reading {plan.table.name} after {after}",
                    job.retries,
                    Backoff(job.backoff_initial_s, job.backoff_max_s),
                )
            except TransientError as exc:
                yield _control(rec, Kind.FAILED, error=str(exc))
                return
            if page.last_key is not None:
                after = page.last_key
                yield self._batch(page.docs, page.failures, orjson.dumps(list(after)).decode())
            if page.rows < page_size:
                yield _control(rec, Kind.PARTITION_END)
                return

    def _page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        from sqlalchemy.exc import DBAPIError

        try:
            return self.builder.page(rng, after, limit)
        except DBAPIError as exc:
            if exc.connection_invalidated or "locked" in str(exc.orig):
                raise TransientError(str(exc.orig)) from exc
            raise

    def _batch(self, docs: list[Any], failures: list[Any], cursor: str) -> pa.RecordBatch:
        rec = self.rec
        n = len(docs) + len(failures) + 1
        kinds = [int(Kind.DOC)] * len(docs) + [int(Kind.DOC_FAILED)] * len(failures) + [int(Kind.PAGE_END)]
        return pa.RecordBatch.from_pydict(
            {
                "pid": [rec.id] * n,
                "token": [rec.claim_token] * n,
                "entity": [rec.entity] * n,
                "kind": kinds,
                "doc_id": [d.id for d in docs] + [f.doc_id for f in failures] + [None],
                "source": [d.source for d in docs] + [None] * (len(failures) + 1),
                "hash": [d.hash for d in docs] + [None] * (len(failures) + 1),
                "cursor": [None] * (n - 1) + [cursor],
                "error": [None] * len(docs) + [f"{f.error_class}: {f.reason}" for f in failures] + [None],
            },
            schema=ARROW_SCHEMA,
        )
