"""The change stream on Spark Structured Streaming: a Python stream reader and the apply tasks.

The reader's planning methods (``latestOffset``, ``partitions``) run in the Python process Spark
keeps for the source; they read one batch of committed changes from the change source, whose
offsets are the log positions. A log is read in order by one reader anyway (a slot, a binlog),
so the changes travel to the executors inside the input partitions, and the work that costs
(fan-out queries, rebuilding documents, bulk writes) runs there, in parallel: the sink is a
``mapInArrow`` of :class:`ApplyTasks` over the batch, run from ``foreachBatch``.

The pipeline travels inside a class built for the run (its source is pickled by value) and in
the pickled task function, never in Spark options: secrets stay out of plans, the UI and logs.
A batch is at-least-once: Spark or sparkindex may run it again after a failure, and the writes
are upserts and deletes by id with external versions, so a repeat changes nothing.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparkindex.capture.ranges import spread_truncates
from sparkindex.config.model import Pipeline
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import TransientError
from sparkindex.sources.change_model import STREAM_DDL, Batch, Change, end_row
from sparkindex.spark.task_errors import classify, encode

log = logging.getLogger(__name__)

#: Changes per input partition: a batch larger than this is applied by several tasks at once.
CHANGES_PER_TASK = 5000

SUMMARY_DDL = (
    "alias string, applied long, deleted long, failed long, skipped long, deferred long, "
    "end_offset string, end_position long, ts double, error string"
)
SUMMARY_SCHEMA = pa.schema(
    [
        ("alias", pa.string()),
        ("applied", pa.int64()),
        ("deleted", pa.int64()),
        ("failed", pa.int64()),
        ("skipped", pa.int64()),
        ("deferred", pa.int64()),
        ("end_offset", pa.string()),
        ("end_position", pa.int64()),
        ("ts", pa.float64()),
        ("error", pa.string()),  # an error the task classified (spark/task_errors.py), as JSON
    ]
)


class ChangePartition(InputPartition):
    """Some of a batch's changes (as stream rows); the first partition also closes the batch."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(len(rows))
        self.rows = rows


@dataclass(frozen=True)
class StreamSpec:
    """What a reader needs besides the pipeline: plain values, safe in Spark options."""

    group: str
    consumer: str
    tables: list[dict[str, Any]]
    limit: int
    until: dict[str, Any] | None

    def to_json(self) -> str:
        return orjson.dumps(self.__dict__).decode()


class ChangeStreamReader(DataSourceStreamReader):
    def __init__(self, wire: str, spec: Mapping[str, Any], initial: Mapping[str, Any]) -> None:
        self.wire = wire
        self.spec = dict(spec)
        self.initial = dict(initial)
        self._source: Any = None
        self._stash: dict[str, Batch] = {}
        self._events: Any = None

    def _pipeline(self) -> Pipeline:
        return Pipeline.from_wire(orjson.loads(self.wire))

    def _changes(self) -> Any:
        if self._source is None:
            from sparkindex.capture.session import change_source_for

            self._source = change_source_for(self.wire, self.spec)
        return self._source

    def _record(self, kind: str, message: str) -> None:
        try:
            if self._events is None:
                from sparkindex.coordination.engine import make_engine
                from sparkindex.coordination.sync_events import SyncEvents

                p = self._pipeline()
                self._events = SyncEvents(make_engine(p.coordination_url()), p.coordination.prefix)
            self._events.record(str(self.spec.get("group", "")), kind, message)
        except Exception as exc:  # noqa: BLE001 - counting must never stop the stream
            log.warning("could not count a change source error: %s", exc)

    def initialOffset(self) -> dict[str, Any]:
        return self.initial

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        try:
            batch: Batch = self._changes().read(start, int(self.spec["limit"]), self.spec.get("until"))
        except TransientError as exc:
            # A source restart or a busy slot: no data this trigger; the next one tries again.
            # Counted in the store: this process's log never reaches the sync's terminal.
            log.warning("change source unavailable: %s", exc)
            self._record("source", str(exc))
            return start
        if not batch.changes and batch.offset == start:
            return start
        self._stash = {_key(batch.offset): batch}
        return batch.offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if start == end:
            return []
        batch = self._stash.pop(_key(end), None)
        if batch is None:  # planned by an earlier reader process: read the same range again
            batch = self._changes().read(start, 1 << 30, end)
        closing = end_row(end, self._changes().position(end), batch.ts)
        chunks = self._by_row(spread_truncates(self._pipeline(), batch.changes))
        chunks[0] = [closing, *chunks[0]]
        return [ChangePartition(chunk) for chunk in chunks]

    def _by_row(self, changes: list[Change]) -> list[list[tuple[Any, ...]]]:
        """Changes split into tasks by the row they touch (its key or link columns), so that all
        changes of a row meet in one task and its documents are rebuilt once per batch."""
        # a key diff's range and a truncate's: a task each
        ranged = [[c.to_row()] for c in changes if c.op == "recheck" or (c.op == "truncate" and c.old)]
        changes = [c for c in changes if not (c.op == "recheck" or (c.op == "truncate" and c.old))]
        n = max(1, -(-len(changes) // CHANGES_PER_TASK))
        if n == 1:
            return [[c.to_row() for c in changes], *ranged]
        links = {t["name"]: list(t["link_columns"]) for t in self.spec["tables"]}
        chunks: list[list[tuple[Any, ...]]] = [[] for _ in range(n)]
        for c in changes:
            image = c.new or c.old or {}
            # link values alone: a product and its reviews (product_id) land in the same task
            key = orjson.dumps([image.get(col) for col in links.get(c.table, ())], default=str)
            chunks[zlib.crc32(key) % n].append(c.to_row())
        return [*chunks, *ranged]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, ChangePartition)
        yield from partition.rows

    def stop(self) -> None:
        if self._source is not None:
            self._source.close()


def _key(offset: Mapping[str, Any]) -> str:
    return orjson.dumps(offset, option=orjson.OPT_SORT_KEYS).decode()


class ChangeDataSource(DataSource):
    """Subclassed per run by :func:`register_change_source` with the pipeline inside."""

    wire: str = ""
    source_name: str = "sparkindex_changes"

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    def schema(self) -> str:
        return STREAM_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        spec = orjson.loads(self.options["spec"])
        initial = orjson.loads(self.options["initial"])
        return ChangeStreamReader(self.wire, spec, initial)


def register_change_source(spark: Any, wire: str, run_id: str) -> str:
    """Register a data source for this run that carries the pipeline; return its format name."""
    name = f"sparkindex_changes_{run_id}"
    cls = type(f"ChangeDataSource_{run_id}", (ChangeDataSource,), {"wire": wire, "source_name": name})
    spark.dataSource.register(cls)
    return name


class ApplyTasks:
    """The sink's task function: apply a slice of the batch to every alias of the run.

    *plan* maps each alias to (physical index, position already applied): changes at or below
    that position are skipped for that alias (its consumer group applied them before).
    """

    def __init__(
        self,
        wire: str,
        run: Mapping[str, Any],
        plan: Mapping[str, tuple[str, int]],
        plans: Mapping[str, IndexPlan],
        key: str,
    ) -> None:
        self.wire = wire
        self.run = dict(run)
        self.plan = dict(plan)
        self.plans = dict(plans)  # the driver's document plans (resolved once per sync run)
        self.key = key

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = [r for batch in batches for r in batch.to_pylist()]
        try:
            out = self._apply(rows)
        except Exception as exc:
            error = classify(exc)
            if error is None:
                raise  # unclassified: the task fails and the driver retries the batch
            out = [_summary(None, error=encode(error))]
        yield pa.RecordBatch.from_pylist(out, schema=SUMMARY_SCHEMA)

    def _apply(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from sparkindex.capture.session import sync_context

        ctx = sync_context(self.wire, orjson.dumps(self.run).decode())
        ends = [row for row in rows if row["kind"] == "end"]
        changes = [Change.from_row(_as_tuple(row)) for row in rows if row["kind"] != "end"]
        out = []
        for alias, (index, after) in self.plan.items():
            # a key diff's range is not a commit: an alias ahead of the batch still checks it
            todo = [c for c in changes if c.position > after or c.op == "recheck"]
            counts = ctx.apply(alias, index, todo, self.plans, self.key)
            out.append(
                _summary(
                    alias,
                    applied=counts.applied,
                    deleted=counts.deleted,
                    failed=counts.failed,
                    skipped=counts.skipped,
                    deferred=counts.deferred,
                )
            )
        for end in ends:
            out.append(_summary(None, end_offset=end["offset"], end_position=end["position"], ts=end["ts"]))
        return out


def _summary(alias: str | None, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in SUMMARY_SCHEMA.names}
    row.update({"alias": alias, "applied": 0, "deleted": 0, "failed": 0, "skipped": 0, "deferred": 0})
    row.update(values)
    return row


def _as_tuple(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["kind"], row["tbl"], row["op"], row["old"], row["new"], row["position"], row["ts"], row["offset"])
