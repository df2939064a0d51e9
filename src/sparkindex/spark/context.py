"""What a Spark Python worker needs to run partitions, built once per worker process.

Workers are reused across tasks (``spark.python.worker.reuse``), so the store connection, the
source engine and the target are cached per pipeline in the process. Document plans are not
resolved here: the driver resolves and fingerprints them once and ships them inside the task,
so every document of a version is built from the one plan the job was fingerprinted with, even
when the schema changes while the job runs (the driver detects that before the swap). Builders
are cached per (plan key, alias): the key is the job's fingerprint, or the run's.
"""

from __future__ import annotations

import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import TracebackType
from typing import Any, Self

import orjson

from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import DocumentBuilder, make_builder
from sparkindex.documents.plan import KEPT_PLAN_SETS, IndexPlan, shipped_plan
from sparkindex.documents.source_lookup import SourceLookup
from sparkindex.resources import open_source, open_store, open_target
from sparkindex.sources.base import Source
from sparkindex.targets.target import Target
from sparkindex.worker.partition import PartitionWorker, WorkerSettings


@dataclass
class ShippedPlans:
    """The builders and source lookups of one set of shipped plans, in one worker process."""

    plans: Mapping[str, IndexPlan]
    builders: dict[str, DocumentBuilder] = field(default_factory=dict)
    lookups: dict[str, SourceLookup] = field(default_factory=dict)
    #: the same on the primary, with a read replica (verify's second look at drift)
    primary_builders: dict[str, DocumentBuilder] = field(default_factory=dict)
    primary_lookups: dict[str, SourceLookup] = field(default_factory=dict)


@dataclass
class WorkerContext:
    """The store it is given, and the source and target it opens on first use (and closes: it is
    a context manager for a caller that runs partitions for a while, such as the driver's head
    start; a Spark worker's, :func:`worker_context`, lives as long as its process)."""

    pipeline: Pipeline
    store: CoordinationStore
    _source: Source | None = None
    _primary: Source | None = None
    _target: Target | None = None
    _shipped: OrderedDict[str, ShippedPlans] = field(default_factory=OrderedDict)

    @property
    def source(self) -> Source:
        if self._source is None:
            # a reindex's partitions and verify's ranges: the read replica when there is one (the
            # driver waited for it to replay the primary's position before any task ran)
            self._source = open_source(self.pipeline, bulk_reads=True)
        return self._source

    @property
    def primary(self) -> Source | None:
        """With ``source.read_url``: the primary, which verify asks again about the ids the
        replica's rows call drift (a replica is behind a live sync); None without one."""
        if self.pipeline.source.read_url is None:
            return None
        if self._primary is None:
            self._primary = open_source(self.pipeline)
        return self._primary

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = open_target(self.pipeline)
        return self._target

    def close(self) -> None:
        """Close the source and the target it opened (the store is its caller's to close)."""
        source, self._source = self._source, None
        primary, self._primary = self._primary, None
        target, self._target = self._target, None
        self._shipped.clear()
        try:
            for opened in (source, primary):
                if opened is not None:
                    opened.close()
        finally:
            if target is not None:
                target.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def shipped(self, plans: Mapping[str, IndexPlan], key: str) -> ShippedPlans:
        """The cache of the plans the driver shipped under *key* (a job, or a run: unique to it)."""
        found = self._shipped.get(key)
        if found is None:
            found = self._shipped[key] = ShippedPlans(plans)
            while len(self._shipped) > KEPT_PLAN_SETS:
                self._shipped.popitem(last=False)
        else:
            self._shipped.move_to_end(key)
        return found

    def builders(self, plans: Mapping[str, IndexPlan], key: str) -> Callable[[str], DocumentBuilder]:
        """The builder of each alias, from the plans the driver shipped (*key* names them)."""
        cache = self.shipped(plans, key)

        def builder(alias: str) -> DocumentBuilder:
            cached = cache.builders.get(alias)
            if cached is None:
                plan = shipped_plan(cache.plans, alias)
                cached = cache.builders[alias] = make_builder(self.source, plan, self.store.transform_cache)
            return cached

        return builder

    def partition_worker(self, job_id: str, run_id: str, plans: Mapping[str, IndexPlan], key: str) -> PartitionWorker:
        indexes = self.store.job_rows.job(job_id).targets
        return PartitionWorker(
            self.store, self.target, self.builders(plans, key), job_id, run_id, indexes, worker_settings(self.pipeline)
        )


@dataclass
class PlannedResources:
    """A worker's resources with the builders and lookups of the plans one task was shipped
    (what a verify range task reads: :class:`sparkindex.verify.ranges.Resources`)."""

    context: WorkerContext
    plans: ShippedPlans

    @property
    def source(self) -> Source:
        return self.context.source

    @property
    def target(self) -> Target:
        return self.context.target

    @property
    def store(self) -> CoordinationStore:
        return self.context.store

    def builder(self, alias: str) -> DocumentBuilder:
        cached = self.plans.builders.get(alias)
        if cached is None:
            plan = shipped_plan(self.plans.plans, alias)
            cached = self.plans.builders[alias] = make_builder(self.source, plan, self.store.transform_cache)
        return cached

    def lookup(self, alias: str) -> SourceLookup:
        cached = self.plans.lookups.get(alias)
        if cached is None:
            cached = self.plans.lookups[alias] = SourceLookup(self.source, self.builder(alias).plan)
        return cached

    def primary_builder(self, alias: str) -> DocumentBuilder | None:
        primary = self.context.primary
        if primary is None:
            return None
        cached = self.plans.primary_builders.get(alias)
        if cached is None:
            plan = shipped_plan(self.plans.plans, alias)
            cached = self.plans.primary_builders[alias] = make_builder(primary, plan, self.store.transform_cache)
        return cached

    def primary_lookup(self, alias: str) -> SourceLookup | None:
        primary = self.context.primary
        if primary is None:
            return None
        cached = self.plans.primary_lookups.get(alias)
        if cached is None:
            cached = self.plans.primary_lookups[alias] = SourceLookup(primary, self.builder(alias).plan)
        return cached


def worker_settings(pipeline: Pipeline) -> WorkerSettings:
    j = pipeline.job
    return WorkerSettings(
        batch_size=j.batch_size,
        batch_bytes=j.batch_bytes,
        retries=j.retries,
        partition_retries=j.partition_retries,
        backoff_initial_s=j.backoff_initial_s,
        backoff_max_s=j.backoff_max_s,
        claim_timeout_s=j.claim_timeout_s,
        reopen_after_s=j.reopen_after_s,
        max_in_flight=j.bulk_in_flight,
        sync_every_s=j.sync_every_s,
    )


@cache
def worker_context(wire: str) -> WorkerContext:
    pipeline = Pipeline.from_wire(orjson.loads(wire))
    return WorkerContext(pipeline, open_store(pipeline))  # kept for the worker process's life, never closed


def task_identity(run_id: str) -> str:
    """``host:pid:run:task<partition>.<attempt>``: who owns a claim, down to the Spark attempt."""
    part, attempt = "?", "?"
    try:
        from pyspark import TaskContext

        ctx: Any = TaskContext.get()
        if ctx is not None:
            part, attempt = str(ctx.partitionId()), str(ctx.attemptNumber())
    except ImportError:
        pass
    return f"{socket.gethostname()}:{os.getpid()}:{run_id}:task{part}.{attempt}"
