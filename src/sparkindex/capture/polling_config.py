"""Which column, overlap and deletes polling uses for each table, from every index's ``changes:``.

Each index may say how its tables are polled (``indexes[].changes``). A table belongs to the
relation tree of one or more indexes; it is read once, by one column, so two indexes that poll the
same table by different columns contradict each other and the pipeline is refused, naming the
later one (``pipeline.yaml: indexes[1].changes: …``). The overlap window of a shared table is
the longest any of them asks for (a longer window only finds more late commits). An index without
``changes:`` of its own polls as the first index that has one (as it always did), so adding a
second index does not force a second section.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.config.model import Pipeline
from sparkindex.config.sync import ChangesConfig
from sparkindex.errors import ConfigError


@dataclass(frozen=True)
class TablePolling:
    column: str
    overlap_s: float
    #: the index whose ``changes:`` set the column (for messages: ``indexes[i].changes``)
    where: str


@dataclass(frozen=True)
class PollingPlan:
    tables: dict[str, TablePolling]
    #: tombstone tables (``changes.tombstones``) of every index, in declaration order
    tombstones: list[str]
    #: each alias's ``changes:`` (its own, or the first one declared)
    configs: dict[str, ChangesConfig]
    #: the first ``changes:`` declared: tables no index tree names fall back to it
    default: ChangesConfig

    def column(self, table: str) -> str:
        found = self.tables.get(table)
        return found.column if found is not None else self.default.tables.get(table, self.default.column)

    def overlap_s(self, table: str) -> float:
        found = self.tables.get(table)
        return found.overlap_s if found is not None else self.default.overlap_s


def plan_polling(pipeline: Pipeline) -> PollingPlan:
    declared = [(i, idx.changes) for i, idx in enumerate(pipeline.indexes) if idx.changes is not None]
    if not declared:
        raise ConfigError(
            f"{pipeline.origin}: indexes[].changes: polling change capture needs a monotone column, "
            "e.g. changes: {column: updated_at}"
        )
    first, default = declared[0]
    tables: dict[str, TablePolling] = {}
    tombstones: list[str] = []
    configs: dict[str, ChangesConfig] = {}
    for i, idx in enumerate(pipeline.indexes):
        cfg, owner = (idx.changes, i) if idx.changes is not None else (default, first)
        configs[idx.alias] = cfg
        names = list(_tree(idx))
        if cfg.tombstones is not None:
            names.append(cfg.tombstones)
            if cfg.tombstones not in tombstones:
                tombstones.append(cfg.tombstones)
        for name in names:
            wanted = TablePolling(cfg.tables.get(name, cfg.column), cfg.overlap_s, f"indexes[{owner}].changes")
            known = tables.get(name)
            if known is not None and known.column != wanted.column:
                raise ConfigError(
                    f"{pipeline.origin}: {wanted.where}: table {name!r} is polled by column {wanted.column!r} "
                    f"here but by {known.column!r} in {known.where}; a table is read by one column: name the "
                    f"same one in both (changes.tables: {{{name}: …}} sets it for one table)"
                )
            overlap = max(wanted.overlap_s, known.overlap_s) if known is not None else wanted.overlap_s
            tables[name] = TablePolling(wanted.column, overlap, known.where if known is not None else wanted.where)
    return PollingPlan(tables, tombstones, configs, default)


def _tree(idx: IndexConfig) -> Iterator[str]:
    yield idx.table
    yield from _relations(idx.relations)


def _relations(relations: list[RelationConfig]) -> Iterator[str]:
    for rel in relations:
        yield rel.table
        yield from _relations(rel.relations)
