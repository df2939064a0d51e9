"""``sparkindex``: write any DataFrame to any target, like es-hadoop's ``format("es")``.

Two modes, chosen by the columns it is given:

* job mode (the ``sparkindex_job`` reader's rows): documents plus partition control rows, written
  through :class:`PartitionSink`, which moves cursors and completes partitions;
* plain mode (any DataFrame): each row becomes a document whose id is ``id_column``; documents
  the target rejects are dead-lettered if a coordination store is given, otherwise the write fails
  and names them.

    df.write.format("sparkindex").option("target", "tantivy:///srv/idx").option("index", "products")
      .option("id_column", "id").mode("append").save()
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from sparkindex.documents.builder import document_id
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.errors import PermanentError
from sparkindex.retry import Backoff
from sparkindex.spark.bulk import bulk_with_retries
from sparkindex.spark.context import worker_context
from sparkindex.spark.rows import CONTROL_COLUMNS
from sparkindex.spark.sink import PartitionSink, SinkSettings
from sparkindex.targets.base import BulkDocument
from sparkindex.targets.registry import open_target

log = logging.getLogger(__name__)


@dataclass
class WriteReport(WriterCommitMessage):
    written: int
    failed: int
    sample_failures: list[tuple[str, str, str]]


class SparkIndexDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparkindex"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        names = set(schema.fieldNames())
        if names >= CONTROL_COLUMNS and "pipeline" in self.options:
            return JobWriter(dict(self.options))
        return PlainWriter(dict(self.options), schema.fieldNames())


class JobWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.wire = options["pipeline"]
        self.job_id = options["job_id"]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        ctx = worker_context(self.wire)
        job = ctx.pipeline.job
        indexes = ctx.store.job(self.job_id).targets
        sink = PartitionSink(
            ctx.store,
            ctx.target,
            self.job_id,
            indexes,
            SinkSettings(
                job.batch_size,
                job.batch_bytes,
                job.retries,
                job.partition_retries,
                job.backoff_initial_s,
                job.backoff_max_s,
            ),
        )
        for batch in iterator:
            for row in batch.to_pylist():
                sink.accept(row)
        sink.close()
        return WriteReport(sink.written, 0, [])


class PlainWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], columns: list[str]) -> None:
        try:
            self.target_url = options["target"]
            self.index = options["index"]
        except KeyError as exc:
            raise PermanentError(f"sparkindex writer: option {exc.args[0]!r} is required") from None
        self.id_columns = [c.strip() for c in options.get("id_column", "id").split(",")]
        missing = [c for c in self.id_columns if c not in columns]
        if missing:
            raise PermanentError(f"sparkindex writer: id column(s) {missing} not in the DataFrame ({columns})")
        self.batch_size = int(options.get("batch_size", "2000"))
        self.retries = int(options.get("retries", "5"))
        self.base_dir = Path(options.get("base_dir", "."))
        self.coordination = options.get("coordination")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        target = open_target(self.target_url, self.base_dir, {})
        index = target.alias_target(self.index) or self.index
        written, failures = 0, []
        for batch in iterator:
            docs = []
            for row in batch.to_pylist():
                doc_id = document_id([row[c] for c in self.id_columns])
                canonical = dumps_document(row)
                docs.append(BulkDocument(doc_id, canonical, content_hash(canonical)))
            for i in range(0, len(docs), self.batch_size):
                out = bulk_with_retries(target, index, docs[i : i + self.batch_size], self.retries, Backoff())
                written += out.success
                failures.extend(out.failures)
        if failures and self.coordination:
            from sparkindex.coordination.store import CoordinationStore

            store = CoordinationStore(self.coordination)
            store.dead_letters.add("dataframe-write", self.index, None, failures)
            store.close()
        return WriteReport(written, len(failures), failures[:5])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        reports = [m for m in messages if isinstance(m, WriteReport)]
        failed = sum(m.failed for m in reports)
        if failed and not self.coordination:
            sample = [f for m in reports for f in m.sample_failures][:5]
            raise PermanentError(f"{failed} document(s) rejected by {self.index!r}, e.g. {sample}")
