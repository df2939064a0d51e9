"""``sparkindex``: write any DataFrame to any target, like es-hadoop's ``format("es")``.

Each row becomes a document whose id is ``id_column`` (so a retried task overwrites, never
duplicates), written with the same bulk loop as the job's partition worker; documents the target
rejects are dead-lettered if a coordination store is given, otherwise the write fails and names them.

    df.write.format("sparkindex").option("target", "tantivy:///srv/idx").option("index", "products")
      .option("id_column", "id").mode("append").save()

The target's own options go as ``target.<key>``, secrets as ``target.<key>_env`` naming an
environment variable of the executors (never the secret itself: Spark shows its options).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from sparkindex.checksums import document_check
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.errors import PermanentError
from sparkindex.keys import document_id, sort_key
from sparkindex.retry import Backoff
from sparkindex.spark.target_options import open_target_with, target_options
from sparkindex.targets.base import BulkItem
from sparkindex.worker.bulk import bulk_with_retries

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
        return PlainWriter(dict(self.options), schema.fieldNames())


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
        #: ``target.<key>`` / ``target.<key>_env`` (see :mod:`.target_options`)
        self.target_options = target_options(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        written, failures = 0, []
        with open_target_with(self.target_url, self.base_dir, self.target_options, "sparkindex writer") as target:
            index = target.alias_target(self.index) or self.index
            for batch in iterator:
                docs = []
                for row in batch.to_pylist():
                    key = [row[c] for c in self.id_columns]
                    canonical = dumps_document(row)
                    doc_id = document_id(key)
                    docs.append(
                        BulkItem(
                            doc_id,
                            canonical,
                            content_hash(canonical),
                            fields=row,
                            sort_key=sort_key(key),
                            check=document_check(doc_id, canonical),
                        )
                    )
                for i in range(0, len(docs), self.batch_size):
                    out = bulk_with_retries(target, index, docs[i : i + self.batch_size], self.retries, Backoff())
                    written += out.success
                    failures.extend(out.failures)
        if failures and self.coordination:
            from sparkindex.resources import open_store_url

            with open_store_url(self.coordination) as store:
                store.dead_letters.add("dataframe-write", self.index, None, failures)
        return WriteReport(written, len(failures), failures[:5])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        reports = [m for m in messages if isinstance(m, WriteReport)]
        failed = sum(m.failed for m in reports)
        if failed and not self.coordination:
            sample = [f for m in reports for f in m.sample_failures][:5]
            raise PermanentError(f"{failed} document(s) rejected by {self.index!r}, e.g. {sample}")
