"""The shape ``sparkindex explain`` shows: which rows make documents, and what each document holds.

Why: the sample document shows the result of a shape (renamed, computed and left-out fields), not
what made it. A user who adds ``where:`` or a computed field wants both side by side: the filters
of every level, the renames, the columns left out, each computed field with the type the database
gives its result and the mapping type it became, the routing column, the delete mode and the
transform's identity (its function, the version in every document's hash, the fields its output
may depend on). Everything is read from the resolved plan and mapping the reindex uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa

from sparkindex.config.indexes import RelationConfig
from sparkindex.documents.key_rules import type_name
from sparkindex.documents.mapping import Mapping
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.documents.shape import Shape


@dataclass(frozen=True)
class ComputedField:
    """One computed field: where it sits, its SQL, and how it is typed."""

    #: the field's dotted path in the document (``reviews.score``)
    path: str
    expression: str
    #: the type the database gives the expression's result (``BIGINT``; ``TEXT`` when unknown)
    database_type: str
    #: the mapping type it became (``long``); None when an override removed it from the mapping
    mapping_type: str | None


@dataclass(frozen=True)
class DocumentShape:
    """How the documents of an index are shaped, level by level."""

    #: the root table's row filter
    filter: str | None = None
    #: relation path -> its row filter
    relation_filters: dict[str, str] = field(default_factory=dict)
    #: field path -> the column its value comes from
    renamed: dict[str, str] = field(default_factory=dict)
    #: the columns left out, as paths (``internal_notes``, ``reviews.author_email``)
    excluded: list[str] = field(default_factory=list)
    computed: list[ComputedField] = field(default_factory=list)
    #: the root column whose value routes each document (``_routing``)
    routing: str | None = None
    #: "hard" or "soft"
    deletes: str = "hard"
    #: ``{"function", "version", "on_change"}`` of the transform, or None
    transform: dict[str, Any] | None = None

    @property
    def plain(self) -> bool:
        """Nothing shaped: every row of every table, every column, as it is, no transform."""
        return self == DocumentShape()

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["computed"] = [asdict(c) for c in self.computed]
        return body


def describe_shape(plan: IndexPlan, mapping: Mapping) -> DocumentShape:
    """The shape of *plan*'s documents, the computed fields typed from *mapping*."""
    cfg = plan.config
    relation_filters: dict[str, str] = {}
    excluded = list(cfg.exclude)
    computed = _computed("", plan.shape, mapping)
    _walk(plan.relations, cfg.relations, "", mapping, relation_filters, excluded, computed)
    transform = None
    if cfg.transform is not None:
        t = cfg.transform
        transform = {"function": t.function, "version": t.version, "on_change": t.on_change}
    return DocumentShape(
        filter=cfg.where,
        relation_filters=relation_filters,
        renamed={path: f.from_ for path, f in cfg.fields.items() if f.from_ is not None},
        excluded=excluded,
        computed=computed,
        routing=cfg.routing,
        deletes=cfg.deletes,
        transform=transform,
    )


def _walk(
    plans: Sequence[RelationPlan],
    configs: Sequence[RelationConfig],
    prefix: str,
    mapping: Mapping,
    filters: dict[str, str],
    excluded: list[str],
    computed: list[ComputedField],
) -> None:
    """Relations resolve in their config's order, so plan and config pair up by position."""
    for rel, rel_cfg in zip(plans, configs, strict=True):
        path = f"{prefix}{rel.name}"
        if rel_cfg.where is not None:
            filters[path] = rel_cfg.where
        excluded.extend(f"{path}.{name}" for name in rel_cfg.exclude)
        computed.extend(_computed(f"{path}.", rel.shape, mapping))
        _walk(rel.children, rel_cfg.relations, f"{path}.", mapping, filters, excluded, computed)


def _computed(prefix: str, shape: Shape, mapping: Mapping) -> list[ComputedField]:
    return [
        ComputedField(
            f"{prefix}{name}",
            sql,
            type_name(shape.computed_types.get(name, sa.Text())),
            _mapping_type(mapping, f"{prefix}{name}"),
        )
        for name, sql in shape.computed.items()
    ]


def _mapping_type(mapping: Mapping, path: str) -> str | None:
    node: Any = mapping
    for part in path.split("."):
        node = (node.get("properties") or {}).get(part) if isinstance(node, dict) else None
        if node is None:
            return None
    found = node.get("type", "object") if isinstance(node, dict) else None
    return None if found is None else str(found)


__all__ = ["ComputedField", "DocumentShape", "describe_shape"]
