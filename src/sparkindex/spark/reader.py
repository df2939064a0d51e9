"""``spark.read.format("sparkindex")``: an index (or an alias) as a DataFrame, read in slices.

    spark.read.format("sparkindex").option("target", "tantivy:///srv/idx").option("index", "products")
      .option("query", "name:lamp").option("fields", "name,price").option("partitions", "8").load()

The schema comes from the index's mapping (:mod:`sparkindex.index_source.columns`): ``_id`` and
the top-level fields. Spark partitions are ranges of the sortable key that every document
stores (``_key``), cut by the target's :meth:`key_splits`, and each task pages through its range
with :meth:`read_documents` (keyset on ``_key``): the same two calls on every backend, so no
slice overlaps another or leaves a gap, whatever the keys hold. An alias is resolved once, on
the driver: every slice reads the same physical index even if the alias moves meanwhile. Pages
travel as Arrow record batches.

Options: ``target`` and ``index`` (required); ``query`` (the backend's query-string syntax,
Lucene-like on every backend: ``name:lamp AND stock:[1 TO 10]``; bare words search the text
fields); ``fields`` (comma-separated top-level fields); ``partitions`` (default: one per
50,000 documents); ``page_size``; ``base_dir`` (for a relative ``tantivy://`` root);
``target.<option>`` for the target's own options, and ``target.<option>_env`` to take an
option's value (a password) from an environment variable (:mod:`.target_options`), so that
secrets never sit in Spark options or plans.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from sparkindex.errors import ConfigError, PermanentError
from sparkindex.index_source.columns import ID_COLUMN, DocumentColumns
from sparkindex.spark.target_options import open_target_with
from sparkindex.spark.target_options import target_options as given_target_options
from sparkindex.spark.writer import SparkIndexDataSource
from sparkindex.targets.reader import TargetReader

WHERE = "sparkindex reader"
#: Documents per slice when the ``partitions`` option is not given.
DEFAULT_SLICE_DOCS = 50_000
MAX_DEFAULT_SLICES = 1024


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{WHERE}: option {name!r} must be a positive integer, got {raw!r}")
    return value


@dataclass(frozen=True)
class ReadOptions:
    target_url: str
    index: str
    base_dir: Path
    query: str | None = None
    fields: list[str] | None = None
    partitions: int | None = None
    page_size: int = 1000
    #: ``target.<key>`` options; ``target.<key>_env`` ones are looked up when the target is opened
    target_options: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        missing = [k for k in ("target", "index") if not options.get(k)]
        if missing:
            raise ConfigError(f"{WHERE}: option {missing[0]!r} is required")
        fields = options.get("fields")
        chosen = None if fields is None else [f.strip() for f in fields.split(",") if f.strip()]
        if chosen is not None and not chosen:
            raise ConfigError(f"{WHERE}: option 'fields' names no field")
        return cls(
            target_url=options["target"],
            index=options["index"],
            base_dir=Path(options.get("base_dir", ".")),
            query=options.get("query") or None,
            fields=chosen,
            partitions=_positive(options, "partitions"),
            page_size=_positive(options, "page_size") or 1000,
            target_options=given_target_options(options),
        )

    def open(self) -> TargetReader:
        return open_target_with(self.target_url, self.base_dir, self.target_options, WHERE)


def index_columns(opts: ReadOptions, target: TargetReader, physical: str) -> DocumentColumns:
    return DocumentColumns.of(target.mapping(physical), opts.fields, f"{WHERE}: index {opts.index!r}")


class SparkIndexSource(SparkIndexDataSource):
    """``format("sparkindex")``: the DataFrame writer's data source, readable too."""

    def schema(self) -> Any:
        opts = ReadOptions.parse(self.options)
        with opts.open() as target:
            physical = target.alias_target(opts.index) or opts.index
            return from_arrow_schema(index_columns(opts, target, physical).schema)

    def reader(self, schema: Any) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        with opts.open() as target:
            physical = target.alias_target(opts.index) or opts.index  # pinned for every slice
            columns = index_columns(opts, target, physical)
        wanted = [ID_COLUMN, *columns.fields]
        if list(schema.fieldNames()) != wanted:
            raise ConfigError(
                f"{WHERE}: a schema given by the caller ({schema.fieldNames()}) does not match the index's "
                f"columns ({wanted}); leave the schema out and choose fields with option 'fields'"
            )
        return IndexReader(opts, columns, physical)


@dataclass(frozen=True)
class KeySlice(InputPartition):
    """Documents whose sort key is at least ``lo`` and below ``hi`` (None: open)."""

    index: int
    lo: str | None
    hi: str | None


class IndexReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, columns: DocumentColumns, physical: str) -> None:
        self.opts = opts
        self.columns = columns
        self.physical = physical

    def partitions(self) -> list[KeySlice]:
        with self.opts.open() as target:
            parts = self.opts.partitions
            if parts is None:
                docs = target.count(self.physical)
                parts = max(1, min(MAX_DEFAULT_SLICES, math.ceil(docs / DEFAULT_SLICE_DOCS)))
            edges: list[str | None] = [None, *target.key_splits(self.physical, parts), None]
        return [KeySlice(i, lo, hi) for i, (lo, hi) in enumerate(itertools.pairwise(edges))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KeySlice):
            raise TypeError(f"{WHERE}: not a slice of this reader: {partition!r}")
        opts, size = self.opts, self.opts.page_size
        # without a choice of fields, whole sources (the batch picks its columns; no copy per page)
        fields = None if opts.fields is None else self.columns.fields
        with opts.open() as target:
            after = None
            while True:
                docs = target.read_documents(
                    self.physical, (partition.lo, partition.hi), after, size, fields, opts.query
                )
                if docs:
                    yield self.columns.batch(docs)
                if len(docs) < size:
                    return
                after = docs[-1].sort_key
                if after is None:
                    raise PermanentError(f"{WHERE}: index {self.physical!r} returned a document without a sort key")
