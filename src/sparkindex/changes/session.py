"""What a process needs to read or apply changes, built once per process and pipeline.

Spark reuses Python workers across tasks and keeps one process for a stream source's planning,
so connections, resolved plans and builders are cached here per pipeline (the wire string)
instead of being rebuilt for every micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import orjson

from sparkindex.changes.apply import Applier, Consumer, Counts
from sparkindex.changes.fanout import FanOut
from sparkindex.changes.model import Change
from sparkindex.changes.source import ChangeSource, WatchedTable, open_change_source
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import OffsetStore
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import make_builder
from sparkindex.documents.plan import IndexPlan, resolve_index
from sparkindex.sources.base import Source
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target


def watched_tables(fanouts: Sequence[FanOut]) -> list[WatchedTable]:
    """Every table of the given indexes' relation trees, with the columns its deletes must log."""
    merged: dict[str, WatchedTable] = {}
    for fanout in fanouts:
        for table, (columns, where) in fanout.link_columns().items():
            known = merged.get(table)
            cols = list(dict.fromkeys([*(known.link_columns if known else []), *columns]))
            merged[table] = WatchedTable(table, cols, known.where if known else where)
    return list(merged.values())


def resolve_consumer_plan(pipeline: Pipeline, source: Source, alias: str) -> IndexPlan:
    i = [x.alias for x in pipeline.indexes].index(alias)
    return resolve_index(source, pipeline.indexes[i], f"{pipeline.origin}: indexes[{i}]")


@cache
def _change_source(wire: str, spec: str) -> ChangeSource:
    pipeline = Pipeline.from_wire(orjson.loads(wire))
    data = orjson.loads(spec)
    source = open_source(pipeline.source_url(), pipeline.job.source_timeout_s)
    tables = [WatchedTable(t["name"], list(t["link_columns"]), t["where"]) for t in data["tables"]]
    return open_change_source(pipeline, source, tables, data["consumer"])


def change_source_for(wire: str, spec: Mapping[str, Any]) -> ChangeSource:
    return _change_source(wire, orjson.dumps({k: spec[k] for k in ("consumer", "tables")}).decode())


@dataclass
class SyncContext:
    pipeline: Pipeline
    run: dict[str, Any]
    source: Source
    applier: Applier
    consumers: dict[str, Consumer] = field(default_factory=dict)

    def consumer(self, alias: str) -> Consumer:
        if alias not in self.consumers:
            plan = resolve_consumer_plan(self.pipeline, self.source, alias)
            self.consumers[alias] = Consumer(alias, FanOut(plan, self.source), make_builder(self.source, plan))
        return self.consumers[alias]

    def apply(self, alias: str, index: str, changes: Sequence[Change]) -> Counts:
        if not changes:
            return Counts()
        return self.applier.apply(self.consumer(alias), index, changes)


@cache
def sync_context(wire: str, run: str) -> SyncContext:
    pipeline = Pipeline.from_wire(orjson.loads(wire))
    data = orjson.loads(run)
    source = open_source(pipeline.source_url(), pipeline.job.source_timeout_s)
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    store = CoordinationStore(pipeline.coordination_url(), pipeline.coordination.prefix)
    offsets = OffsetStore(store.engine, pipeline.coordination.prefix)
    applier = Applier(target, offsets, store, str(data["job_id"]), pipeline.job.batch_size)
    return SyncContext(pipeline, data, source, applier)
