"""Verify in the calling process, range by range, without Spark: a worker's resources held here
(tests, small indexes, and the sync's own checks of a few ids)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sparkindex.config.job import JobConfig
from sparkindex.documents.builder import DocumentBuilder, make_builder
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.source_lookup import SourceLookup
from sparkindex.errors import SparkIndexError
from sparkindex.sources.base import Source
from sparkindex.targets.target import Target
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.ranges import RangeTask, Resources, TaskOptions, run_range_task
from sparkindex.verify.verifier import Runner, Verifier, VerifyReport


class LocalResources:
    """A worker's resources in the calling process (tests, small indexes, no Spark)."""

    def __init__(
        self,
        source: Source,
        target: Target,
        plans: dict[str, IndexPlan],
        store: Any = None,
        primary: Source | None = None,
    ) -> None:
        """*primary*: when *source* is a read replica, its primary (drift is asked again there)."""
        self._source, self._target, self._store = source, target, store
        cache = None if store is None else store.transform_cache
        self._builders = {alias: make_builder(source, plan, cache) for alias, plan in plans.items()}
        self._lookups: dict[str, SourceLookup] = {}
        self._primary = {} if primary is None else {a: make_builder(primary, p, cache) for a, p in plans.items()}
        self._primary_lookups = {a: SourceLookup(b.source, b.plan) for a, b in self._primary.items()}

    @property
    def source(self) -> Source:
        return self._source

    @property
    def target(self) -> Target:
        return self._target

    @property
    def store(self) -> Any:
        if self._store is None:
            raise SparkIndexError("repair needs the coordination store (for dead letters)")
        return self._store

    def builder(self, alias: str) -> DocumentBuilder:
        return self._builders[alias]

    def lookup(self, alias: str) -> SourceLookup:
        if alias not in self._lookups:
            self._lookups[alias] = SourceLookup(self._source, self._builders[alias].plan)
        return self._lookups[alias]

    def primary_builder(self, alias: str) -> DocumentBuilder | None:
        return self._primary.get(alias)

    def primary_lookup(self, alias: str) -> SourceLookup | None:
        return self._primary_lookups.get(alias)


def local_runner(res: Resources) -> Runner:
    def run(tasks: Sequence[RangeTask], options: TaskOptions, done: Callable[[int], None]) -> list[RangeSummary]:
        out = []
        for task in tasks:
            out.append(run_range_task(res, task, options))
            done(len(out))
        return out

    return run


def verify_alias(source: Source, target: Target, plan: IndexPlan, job: JobConfig | None = None) -> VerifyReport:
    """Verify one alias in this process, range by range (no Spark)."""
    plans = {plan.alias: plan}
    [report] = Verifier(source, target, plans, local_runner(LocalResources(source, target, plans)), job).run()
    return report
