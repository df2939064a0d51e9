"""Inferring a search mapping from the SQL schema, then applying the user's field overrides.

The mapping is expressed once, in the Elasticsearch/OpenSearch dialect (``{"properties": ...}``),
and every target translates it: it is the lingua franca the search world already speaks.
Text versus keyword: unbounded strings (TEXT, CLOB, long VARCHAR) are analysed text; short
bounded strings and UUIDs are keywords (exact match, aggregations). Then, in order: the ``fields``
shorthands, the ``mapping`` override (:mod:`.overrides`) and its root options (``dynamic``).
Join relations add an object under their name (the children's fields) and the join field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from sparkindex.config.indexes import FieldOverride
from sparkindex.documents.overrides import field_paths, merge_properties
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.errors import ConfigError
from sparkindex.sources.base import TableInfo
from sparkindex.targets.base import DELETED_AT_FIELD, DELETED_FIELD

KEYWORD_MAX_LENGTH = 256

Mapping = dict[str, Any]


def field_type(sql_type: sa.types.TypeEngine[Any]) -> str:
    if isinstance(sql_type, sa.Boolean):
        return "boolean"
    if isinstance(sql_type, sa.Integer):
        return "long"
    if isinstance(sql_type, sa.Float | sa.Numeric):
        return "double"
    if isinstance(sql_type, sa.DateTime | sa.Date):
        return "date"
    if isinstance(sql_type, sa.JSON):
        return "object"
    if isinstance(sql_type, sa.Uuid):
        return "keyword"
    if isinstance(sql_type, sa.String):
        length = sql_type.length
        return "keyword" if length is not None and length <= KEYWORD_MAX_LENGTH else "text"
    return "text"


def _properties(table: TableInfo, emit: Sequence[str], relations: Sequence[RelationPlan]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name in emit:
        props[name] = {"type": field_type(table.columns[name].type)}
    for rel in relations:
        props[rel.name] = {
            # a join child's fields sit under its relation's name in its own document
            "type": "object" if rel.kind == "join" else rel.kind,
            "properties": _properties(rel.rows, rel.emit, rel.children),
        }
    return props


def join_mapping(plan: IndexPlan) -> dict[str, Any]:
    """The join field: the parents' name with the names of the join relations as its children."""
    children = [r.name for r in plan.joins]
    return {"type": "join", "relations": {plan.join_parent: children[0] if len(children) == 1 else children}}


def _apply(props: dict[str, Any], path: str, override: FieldOverride, where: str) -> None:
    parts = path.split(".")
    node: dict[str, Any] = {"properties": props}
    for part in parts:
        children = node.get("properties")
        if children is None or part not in children:
            known = ", ".join(sorted(field_paths(props)))
            raise ConfigError(f"{where}.fields.{path}: no such field in the document (fields: {known})")
        node = children[part]
    if override.type is not None:
        node["type"] = override.type
    if override.analyzer is not None:
        if node["type"] != "text":
            raise ConfigError(f"{where}.fields.{path}.analyzer: only text fields have an analyzer")
        node["analyzer"] = override.analyzer
    if override.copy_to:
        node["copy_to"] = list(override.copy_to)
        for target in override.copy_to:
            props.setdefault(target, {"type": "text"})
    if override.keyword:
        node["fields"] = {"keyword": {"type": "keyword", "ignore_above": KEYWORD_MAX_LENGTH}}
    if not override.index:
        node["index"] = False


def infer_mapping(plan: IndexPlan, where: str) -> Mapping:
    """The index's mapping; *where* is the index's config key path (``p.yaml: indexes[0]``)."""
    props = _properties(plan.rows, plan.emit, plan.relations)
    reserved: frozenset[str] = frozenset()
    if plan.join_field is not None:
        props[plan.join_field] = join_mapping(plan)
        reserved = frozenset({plan.join_field})
    if plan.config.deletes == "soft":
        _tombstone_fields(plan, props, where)
    return with_overrides(plan, props, where, reserved)


def _tombstone_fields(plan: IndexPlan, props: dict[str, Any], where: str) -> None:
    """``deletes: soft`` marks removed documents with two fields of its own: searchable on every
    target (readers skip tombstones with ``NOT _deleted:true``: live documents carry neither
    field), and never a column's name."""
    for name in (DELETED_FIELD, DELETED_AT_FIELD):
        if name in props:
            raise ConfigError(
                f"{where}.deletes: soft deletes mark removed documents with {name!r}, which is also a field of the "
                "documents; rename the column (fields: {other: {from: ...}}) or exclude it"
            )
    props[DELETED_FIELD] = {"type": "boolean"}
    props[DELETED_AT_FIELD] = {"type": "date"}


def with_overrides(
    plan: IndexPlan, props: dict[str, Any], where: str, reserved: frozenset[str] = frozenset()
) -> Mapping:
    """*props* (inferred from SQL, or a source index's in an index-to-index rebuild) with the
    index's ``fields`` shorthands, ``mapping`` override and root options applied."""
    if plan.config.transform is not None:
        _declare_transform_fields(props, plan.config.transform.adds, plan.config.mapping.properties, where)
    for path, override in plan.config.fields.items():
        if path.split(".")[0] in reserved:
            raise ConfigError(f"{where}.fields.{path}: {path!r} is the join field, which the join relations declare")
        _apply(props, path, override, where)
    merge_properties(props, plan.config.mapping.properties, f"{where}.mapping.properties", props, reserved)
    return {**plan.config.mapping.root_options(), "properties": props}


def _declare_transform_fields(props: dict[str, Any], adds: list[str], overrides: dict[str, Any], where: str) -> None:
    """The fields a transform adds (an embedding; ``transform.adds``) are not in the schema: the
    ``mapping`` override declares each with its ``type``, and then applies as usual."""
    for i, name in enumerate(adds):
        if name in props:
            raise ConfigError(
                f"{where}.transform.adds[{i}]: {name!r} is already a field of the documents; list only the fields "
                "the transform adds"
            )
        spec = overrides.get(name)
        if not isinstance(spec, dict) or "type" not in spec or "properties" in spec:
            raise ConfigError(
                f"{where}.mapping.properties.{name}: the transform adds {name!r}; declare its mapping here with a "
                "type ({type: knn_vector, dimension: 8}, say)"
            )
        props[name] = {"type": spec["type"]}
