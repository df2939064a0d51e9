"""The partition calculator : counts, complexity, limits, largest work first.

Each entity (alias) is split into key ranges of about ``partition_size`` rows; ``work_units`` is the
row estimate times the entity's complexity factor (documents with many relations cost more).
Limits per entity and per job protect the store; when the job limit binds, every entity's
partitions grow in proportion. The store hands partitions out by priority, then work units.

It sizes a source's rows into work, from the source's own counts and key splits; its callers are
the reindex and ``explain`` (``jobs``) and the verifier (``verify``). The store only keeps what it
planned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sparkindex.config.indexes import IndexConfig
from sparkindex.config.job import JobConfig
from sparkindex.coordination.records import PartitionSpec
from sparkindex.sources.base import Source, TableInfo


@dataclass(frozen=True)
class EntityPlanInput:
    config: IndexConfig
    table: TableInfo
    key: list[str]


def plan_partitions(source: Source, entities: Sequence[EntityPlanInput], job: JobConfig) -> list[PartitionSpec]:
    counts = {e.config.alias: source.count(e.table) for e in entities}
    wanted = {
        e.config.alias: min(
            job.max_partitions_per_entity, max(1, math.ceil(counts[e.config.alias] / e.config.partition_size))
        )
        for e in entities
    }
    total = sum(wanted.values())
    specs: list[PartitionSpec] = []
    for e in entities:
        alias = e.config.alias
        limit = wanted[alias]
        if total > job.max_total_partitions:  # integer arithmetic: every entity keeps its exact share
            limit = max(1, wanted[alias] * job.max_total_partitions // total)
        size = (
            max(e.config.partition_size, math.ceil(counts[alias] / limit)) if counts[alias] else e.config.partition_size
        )
        ranges = source.split_keys(e.table, e.key, size, limit)
        per = math.ceil(counts[alias] / len(ranges)) if ranges else 0
        for i, rng in enumerate(ranges):
            specs.append(
                PartitionSpec(
                    entity=alias,
                    partition_index=i,
                    range_start=rng.after,
                    range_end=rng.upto,
                    estimated_count=per,
                    work_units=math.ceil(round(per * e.config.complexity, 9)),
                    priority=e.config.priority,
                )
            )
    specs.sort(key=lambda s: (-s.priority, -s.work_units, s.entity, s.partition_index))
    return specs
