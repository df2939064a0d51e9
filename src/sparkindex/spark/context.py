"""What a Spark Python worker needs to run partitions, built once per worker process.

Workers are reused across tasks (``spark.python.worker.reuse``), so the store connection, the
source engine, the target and the resolved document plans are cached per pipeline in the process.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import orjson

from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import DocumentBuilder, make_builder
from sparkindex.jobs.planning import resolve_plan
from sparkindex.sources.base import Source
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.targets.target import Target
from sparkindex.worker.partition import PartitionWorker, WorkerSettings


@dataclass
class WorkerContext:
    pipeline: Pipeline
    store: CoordinationStore
    _source: Source | None = None
    _target: Target | None = None
    _builders: dict[str, DocumentBuilder] = field(default_factory=dict)

    @property
    def source(self) -> Source:
        if self._source is None:
            self._source = open_source(self.pipeline.source_url(), self.pipeline.job.source_timeout_s)
        return self._source

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = open_target(self.pipeline.target.url, self.pipeline.base_dir, self.pipeline.target.options)
        return self._target

    def builder(self, alias: str) -> DocumentBuilder:
        if alias not in self._builders:
            i = [x.alias for x in self.pipeline.indexes].index(alias)
            plan, _ = resolve_plan(self.source, self.pipeline.indexes[i], f"indexes[{i}]")
            self._builders[alias] = make_builder(self.source, plan)
        return self._builders[alias]

    def partition_worker(self, job_id: str, run_id: str) -> PartitionWorker:
        indexes = self.store.job(job_id).targets
        return PartitionWorker(
            self.store, self.target, self.builder, job_id, run_id, indexes, worker_settings(self.pipeline)
        )


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
    return WorkerContext(pipeline, CoordinationStore(pipeline.coordination_url(), pipeline.coordination.prefix))


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
