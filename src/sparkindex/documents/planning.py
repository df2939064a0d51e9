"""Resolving the aliases a command names, before any lock is taken or any work is planned."""

from __future__ import annotations

from collections.abc import Sequence

from sparkindex.config.indexes import IndexConfig
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.documents.mapping import Mapping, infer_mapping
from sparkindex.documents.plan import IndexPlan, resolve_index
from sparkindex.documents.transforming import make_transform
from sparkindex.errors import ConfigError
from sparkindex.index_source.source import IndexSource
from sparkindex.sources.base import Source
from sparkindex.targets.writer import TargetWriter


def selected_aliases(pipeline: Pipeline, aliases: Sequence[str] | None) -> list[str]:
    if not aliases:
        return [i.alias for i in pipeline.indexes]
    for alias in aliases:
        pipeline.index(alias)  # raises UsageError naming the known aliases
    return list(dict.fromkeys(aliases))


def resolve_plans(
    pipeline: Pipeline, source: Source, aliases: Sequence[str], target: TargetWriter | None = None
) -> dict[str, tuple[IndexPlan, Mapping]]:
    """Every plan and mapping, so schema errors surface at once with their config key paths;
    then what the target cannot hold (*target*, or the pipeline's own when not given)."""
    out: dict[str, tuple[IndexPlan, Mapping]] = {}
    for i, idx in enumerate(pipeline.indexes):
        if idx.alias in aliases:
            out[idx.alias] = resolve_plan(source, idx, f"{pipeline.origin}: indexes[{i}]")
    check_target_capabilities(pipeline, out, target)
    return out


def resolve_plan(source: Source, cfg: IndexConfig, where: str) -> tuple[IndexPlan, Mapping]:
    """One index's plan and mapping: inferred from the SQL schema, or, when the source is an
    index (an index-to-index rebuild), taken from that index's own mapping."""
    if isinstance(source, IndexSource):
        from sparkindex.documents.from_index import resolve_index_source

        return resolve_index_source(source, cfg, where)
    plan = resolve_index(source, cfg, where)
    check_transform(plan, where)
    return plan, infer_mapping(plan, where)


def check_transform(plan: IndexPlan, where: str) -> None:
    """The transform's function imports here, in the driver, and its ``on_change`` fields are
    fields of the documents (a ConfigError naming the key otherwise)."""
    transform = make_transform(plan)
    if transform is None:
        return
    transform.check(where)
    on_change = plan.config.transform.on_change if plan.config.transform is not None else None
    fields = [*plan.emit, *(r.name for r in plan.embedded)]  # join children are documents of their own
    for i, name in enumerate(on_change or []):
        if name not in fields:
            raise ConfigError(
                f"{where}.transform.on_change[{i}]: {name!r} is not a field of the documents the transform "
                f"receives (fields: {', '.join(fields)})"
            )


def check_target_capabilities(
    pipeline: Pipeline, plans: dict[str, tuple[IndexPlan, Mapping]], target: TargetWriter | None = None
) -> None:
    """Refuse, before any index exists, what the target cannot hold (a config error, exit 2)."""
    _check_routing(pipeline, plans, target)
    joins = [(alias, plan) for alias, (plan, _) in plans.items() if plan.joins]
    if not joins:
        return
    if target is None:  # a class attribute: nothing is opened (a Tantivy target would create its root)
        from sparkindex.targets.registry import target_class

        supported = target_class(pipeline.target.url).supports_join
    else:
        supported = target.supports_join
    if supported:
        return
    alias, plan = joins[0]
    i = next(n for n, idx in enumerate(pipeline.indexes) if idx.alias == alias)
    j = next(n for n, rel in enumerate(plan.relations) if rel.kind == "join")
    raise ConfigError(
        f"{pipeline.origin}: indexes[{i}].relations[{j}].type: join relations make parent-child documents, "
        f"which target {redact_url(pipeline.target.url)!r} cannot hold; use type: nested, or an OpenSearch or "
        "Elasticsearch target"
    )


def _check_routing(
    pipeline: Pipeline, plans: dict[str, tuple[IndexPlan, Mapping]], target: TargetWriter | None = None
) -> None:
    """A routing column needs a target with shards to route to (OpenSearch, Elasticsearch)."""
    routed = [alias for alias, (plan, _) in plans.items() if plan.routing is not None]
    if not routed:
        return
    if target is None:
        from sparkindex.targets.registry import target_class

        supported = target_class(pipeline.target.url).supports_routing
    else:
        supported = target.supports_routing
    if supported:
        return
    i = next(n for n, idx in enumerate(pipeline.indexes) if idx.alias == routed[0])
    raise ConfigError(
        f"{pipeline.origin}: indexes[{i}].routing: target {redact_url(pipeline.target.url)!r} has no shards to route "
        "documents to; routing is for OpenSearch and Elasticsearch targets, remove it"
    )
