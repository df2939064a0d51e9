"""Deferred relations (search-center's delay effect): changes to tables below a relation marked
``deferred: true`` (metadata whose change fans out to huge numbers of documents) are recorded in
the change-snapshot table instead of being applied at once, a later change to the same row
replacing the earlier one, and applied by ``sync --apply-deferred`` or at ``sync.deferred_at``.

The refresh fans the recorded rows out to root keys and rebuilds those documents as one
partitioned Spark job (chunks of keys, one task each). Its writes carry the source's position at
the start of the refresh as their version: the rows are read after it, so the documents are at
least that new, and a concurrent sync's later changes still win.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pyarrow as pa

from sparkindex.capture.fanout import FanOut
from sparkindex.capture.session import resolve_consumer_plan, sync_context, watched_tables
from sparkindex.capture.source import open_change_source
from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.planning import selected_aliases
from sparkindex.keys import dump_key, load_key
from sparkindex.resources import open_source, open_store, open_target
from sparkindex.sources.base import Source
from sparkindex.sources.change_model import Change
from sparkindex.targets.target import Target

#: Root keys rebuilt per Spark task.
KEYS_PER_TASK = 5000
RESULT_DDL = "applied long, deleted long, failed long, skipped long"
RESULT_SCHEMA = pa.schema(
    [("applied", pa.int64()), ("deleted", pa.int64()), ("failed", pa.int64()), ("skipped", pa.int64())]
)


class DeferredTasks:
    """One task per chunk of root keys: rebuild and write them (picklable, plain values)."""

    def __init__(
        self, wire: str, alias: str, index: str, chunks: list[list[str]], version: int, plan: IndexPlan
    ) -> None:
        self.wire = wire
        self.plans = {alias: plan}  # the driver's: workers build documents from it, not from the schema they find
        self.key = f"deferred-{uuid.uuid4().hex}"
        self.alias = alias
        self.index = index
        self.chunks = chunks
        self.version = version

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = sync_context(self.wire, orjson.dumps({"job_id": "deferred", "group": "deferred"}).decode())
        consumer = ctx.consumer(self.alias, self.plans, self.key)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                keys = {tuple(load_key(k) or ()): self.version for k in self.chunks[i]}
                c = ctx.applier.rebuild(consumer, self.index, keys)
                yield pa.RecordBatch.from_pylist(
                    [{"applied": c.applied, "deleted": c.deleted, "failed": c.failed, "skipped": c.skipped}],
                    schema=RESULT_SCHEMA,
                )


def apply_deferred(
    pipeline: Pipeline, aliases: Sequence[str] | None, group: str | None = None, spark: Any = None
) -> dict[str, Any]:
    with open_source(pipeline) as source, open_target(pipeline) as target, open_store(pipeline) as store:
        return _apply_deferred(pipeline, aliases, group, spark, source, target, store)


def _apply_deferred(
    pipeline: Pipeline,
    aliases: Sequence[str] | None,
    group: str | None,
    spark: Any,
    source: Source,
    target: Target,
    store: CoordinationStore,
) -> dict[str, Any]:
    started = time.time()  # changes deferred after this wait for the next refresh
    chosen = selected_aliases(pipeline, aliases)
    fanouts = {a: FanOut(resolve_consumer_plan(pipeline, source, a), source) for a in chosen}
    changes = open_change_source(pipeline, source, watched_tables(list(fanouts.values())), group or pipeline.sync.group)
    try:
        version = changes.position(changes.head())
    finally:
        changes.close()
    totals = {"records": 0, "documents": 0, "applied": 0, "deleted": 0, "failed": 0}
    for alias, fanout in fanouts.items():
        records = store.deferred_changes.deferred(alias)
        index = target.alias_target(alias)
        if not records or index is None:
            continue
        replay = [Change(r.table, "update", r.position, None, image) for r in records for image in r.images]
        keys = [dump_key(k) or "[]" for k in fanout.root_keys(replay, include_deferred=True).keys]
        chunks = [keys[i : i + KEYS_PER_TASK] for i in range(0, len(keys), KEYS_PER_TASK)]
        if chunks:
            session = spark if spark is not None else _session(pipeline)
            fn = DeferredTasks(pipeline.wire_string(), alias, index, chunks, version, fanout.plan)
            rows = session.range(0, len(chunks), 1, len(chunks)).mapInArrow(fn, RESULT_DDL).collect()
            for row in rows:
                for k in ("applied", "deleted", "failed"):
                    totals[k] += int(row[k])
        store.deferred_changes.clear_deferred(alias, records)
        totals["records"] += len(records)
        totals["documents"] += len(keys)
    store.deferred_runs.record_deferred_run(chosen, started)
    return totals


def _session(pipeline: Pipeline) -> Any:
    from sparkindex.spark.session import build_session

    return build_session(pipeline.spark, pipeline.state_dir / "spark.log")


def due(deferred_at: str | None, last_started: float | None, now: dt.datetime | None = None) -> bool:
    """Whether the daily deferred refresh at *deferred_at* ("HH:MM", local time) is due: today's
    time has come and the last refresh (kept in the coordination store, so a restart does not redo
    it) started before it. A refresh run by hand earlier in the day does not cancel it."""
    if deferred_at is None:
        return False
    now = now or dt.datetime.now()
    hour, minute = (int(x) for x in deferred_at.split(":"))
    slot = dt.datetime.combine(now.date(), dt.time(hour, minute))
    return now >= slot and (last_started is None or last_started < slot.timestamp())
