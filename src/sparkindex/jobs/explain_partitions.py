"""The partition plan ``sparkindex explain`` shows: the reindex's own calculator, nothing stored.

Why a module of its own: the calculator (:func:`sparkindex.sources.partition_plan.plan_partitions`)
estimates every partition of an index at the same size (rows / partitions), so on its own it cannot
say which partitions are large. Where the plan is small enough, the rows of each range are counted
here (one ``COUNT`` per range, about one scan of the table in all), which shows skewed boundaries
(a hot key range, a sampled split that missed) before a job runs into them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa

from sparkindex.config.job import JobConfig
from sparkindex.coordination.records import PartitionSpec
from sparkindex.documents.plan import IndexPlan
from sparkindex.keys import document_id
from sparkindex.sources.base import Source, coerce_key
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions

#: ranges counted one by one only up to this many partitions (beyond, the estimate stands)
COUNT_LIMIT = 64
#: how many partitions the plan lists, largest first
LARGEST = 5


@dataclass(frozen=True)
class PartitionView:
    """One planned partition: its key range (bounds as document ids), rows and work units."""

    index: int
    after: str | None
    upto: str | None
    estimated_rows: int
    #: counted in the source (None: not counted, the plan is larger than COUNT_LIMIT)
    rows: int | None
    work_units: int


@dataclass(frozen=True)
class PartitionPlan:
    count: int
    source_rows: int
    partition_size: int
    rows_per_partition: int
    complexity: float
    priority: int
    work_units: int
    #: whether ``rows`` of the partitions were counted in the source
    counted: bool
    largest: list[PartitionView] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def explain_partitions(source: Source, plan: IndexPlan, job: JobConfig, largest: int = LARGEST) -> PartitionPlan:
    """What ``reindex -i <alias>`` would plan now for *plan*, computed but not stored."""
    cfg = plan.config
    source_rows = source.count(plan.table)
    specs = plan_partitions(source, [EntityPlanInput(cfg, plan.table, plan.id_columns)], job)
    counts = _range_counts(source, plan, specs) if len(specs) <= COUNT_LIMIT else None
    views = [
        PartitionView(
            s.partition_index,
            None if s.range_start is None else document_id(s.range_start),
            None if s.range_end is None else document_id(s.range_end),
            s.estimated_count,
            None if counts is None else counts[i],
            s.work_units,
        )
        for i, s in enumerate(specs)
    ]
    if counts is not None:  # largest by what the ranges really hold; ties in claim order
        order = sorted(range(len(views)), key=lambda i: -counts[i])
        views = [views[i] for i in order]
    return PartitionPlan(
        count=len(specs),
        source_rows=source_rows,
        partition_size=cfg.partition_size,
        rows_per_partition=specs[0].estimated_count if specs else 0,
        complexity=cfg.complexity,
        priority=cfg.priority,
        work_units=sum(s.work_units for s in specs),
        counted=counts is not None,
        largest=views[:largest],
    )


def _range_counts(source: Source, plan: IndexPlan, specs: list[PartitionSpec]) -> list[int] | None:
    """Rows in each spec's range, compared as the reindex's pages compare keys (in the database,
    in its collation); None for a source that is not a SQL database (an index)."""
    engine = getattr(source, "engine", None)
    if engine is None:
        return None
    info, key = plan.table, plan.id_columns
    cols = [info.table.c[k] for k in key]
    out: list[int] = []
    with source.connect(f"row counts of the partitions of table {info.name!r}") as conn:
        for spec in specs:
            stmt = sa.select(sa.func.count()).select_from(info.table)
            after = coerce_key(info, key, spec.range_start)
            upto = coerce_key(info, key, spec.range_end)
            if after is not None:
                stmt = stmt.where(Source._key_cond(cols, ">", after))
            if upto is not None:
                stmt = stmt.where(Source._key_cond(cols, "<=", upto))
            out.append(int(conn.execute(stmt).scalar_one()))
    return out
