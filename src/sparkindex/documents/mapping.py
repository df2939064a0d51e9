"""Inferring a search mapping from the SQL schema, then applying the user's field overrides.

The mapping is expressed once, in the Elasticsearch/OpenSearch dialect (``{"properties": ...}``),
and every target translates it: it is the lingua franca the search world already speaks.
Text versus keyword: unbounded strings (TEXT, CLOB, long VARCHAR) are analysed text; short
bounded strings and UUIDs are keywords (exact match, aggregations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from sparkindex.config.model import FieldOverride
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.errors import ConfigError
from sparkindex.sources.base import TableInfo

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
            "type": rel.kind,
            "properties": _properties(rel.table, rel.emit, rel.children),
        }
    return props


def _apply(props: dict[str, Any], path: str, override: FieldOverride, where: str) -> None:
    parts = path.split(".")
    node: dict[str, Any] = {"properties": props}
    for part in parts:
        children = node.get("properties")
        if children is None or part not in children:
            known = ", ".join(sorted(_paths(props)))
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


def _paths(props: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, spec in props.items():
        out.append(prefix + name)
        if "properties" in spec:
            out.extend(_paths(spec["properties"], f"{prefix}{name}."))
    return out


def infer_mapping(plan: IndexPlan, where: str) -> Mapping:
    props = _properties(plan.table, plan.emit, plan.relations)
    for path, override in plan.config.fields.items():
        _apply(props, path, override, where)
    return {"properties": props}
