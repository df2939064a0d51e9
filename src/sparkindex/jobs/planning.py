"""Resolving the aliases a command names, before any lock is taken or any work is planned."""

from __future__ import annotations

from collections.abc import Sequence

from sparkindex.config.model import Pipeline
from sparkindex.documents.mapping import Mapping, infer_mapping
from sparkindex.documents.plan import IndexPlan, resolve_index
from sparkindex.sources.base import Source


def selected_aliases(pipeline: Pipeline, aliases: Sequence[str] | None) -> list[str]:
    if not aliases:
        return [i.alias for i in pipeline.indexes]
    for alias in aliases:
        pipeline.index(alias)  # raises UsageError naming the known aliases
    return list(dict.fromkeys(aliases))


def resolve_plans(pipeline: Pipeline, source: Source, aliases: Sequence[str]) -> dict[str, tuple[IndexPlan, Mapping]]:
    """Every plan and mapping, so schema errors surface at once with their config key paths."""
    out: dict[str, tuple[IndexPlan, Mapping]] = {}
    for i, idx in enumerate(pipeline.indexes):
        if idx.alias in aliases:
            where = f"{pipeline.origin}: indexes[{i}]"
            plan = resolve_index(source, idx, where)
            out[idx.alias] = (plan, infer_mapping(plan, where))
    return out
