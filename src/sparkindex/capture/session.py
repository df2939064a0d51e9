"""What a process needs to read or apply changes, built once per process and pipeline.

Spark reuses Python workers across tasks and keeps one process for a stream source's planning,
so connections and builders are cached here per pipeline (the wire string) instead of being
rebuilt for every micro-batch. Plans are resolved once, by the driver
(:func:`resolve_consumer_plan`), and shipped in the tasks: a worker builds documents from them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import orjson

from sparkindex.capture.apply import Applier, Consumer, Counts
from sparkindex.capture.fanout import FanOut
from sparkindex.capture.source import open_change_source
from sparkindex.config.model import Pipeline
from sparkindex.documents.builder import make_builder
from sparkindex.documents.plan import KEPT_PLAN_SETS, IndexPlan, shipped_plan
from sparkindex.documents.planning import resolve_plan
from sparkindex.resources import open_source, open_store, open_target
from sparkindex.sources.base import Source
from sparkindex.sources.change_model import Change
from sparkindex.sources.change_source import ChangeSource, WatchedTable


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
    """The plan of *alias*, as the reindex resolves it (the driver's side only)."""
    cfg = pipeline.index(alias)  # a UsageError naming the aliases the pipeline has
    i = pipeline.indexes.index(cfg)
    plan, _ = resolve_plan(source, cfg, f"{pipeline.origin}: indexes[{i}]")
    return plan


@cache
def _change_source(wire: str, spec: str) -> ChangeSource:
    pipeline = Pipeline.from_wire(orjson.loads(wire))
    data = orjson.loads(spec)
    source = open_source(pipeline)  # kept for the worker process's life, as the cache is
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
    consumers: OrderedDict[str, dict[str, Consumer]] = field(default_factory=OrderedDict)

    def consumer(self, alias: str, plans: Mapping[str, IndexPlan], key: str) -> Consumer:
        """The consumer of *alias*, built from the plan the driver resolved and shipped
        (*plans*, named by *key*: a sync run or a deferred refresh); the consumers of the last
        few keys are kept (a long-lived worker serves one run at a time)."""
        mine = self.consumers.get(key)
        if mine is None:
            mine = self.consumers[key] = {}
            while len(self.consumers) > KEPT_PLAN_SETS:
                self.consumers.popitem(last=False)
        else:
            self.consumers.move_to_end(key)
        found = mine.get(alias)
        if found is None:
            plan = shipped_plan(plans, alias)
            builder = make_builder(self.source, plan, self.applier.store.transform_cache)
            found = mine[alias] = Consumer(alias, FanOut(plan, self.source), builder)
        return found

    def apply(
        self, alias: str, index: str, changes: Sequence[Change], plans: Mapping[str, IndexPlan], key: str
    ) -> Counts:
        if not changes:
            return Counts()
        return self.applier.apply(self.consumer(alias, plans, key), index, changes)


@cache
def sync_context(wire: str, run: str) -> SyncContext:
    pipeline = Pipeline.from_wire(orjson.loads(wire))
    data = orjson.loads(run)
    # kept for the worker process's life, as the cache is: a long-lived Python worker applies
    # every batch of a sync with them
    source, target, store = open_source(pipeline), open_target(pipeline), open_store(pipeline)
    applier = Applier(target, store, str(data["job_id"]), pipeline.job.batch_size)
    return SyncContext(pipeline, data, source, applier)
