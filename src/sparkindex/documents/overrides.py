"""Merging ``indexes[].mapping`` (a partial OpenSearch/Elasticsearch mapping) over the inferred one.

The override is the user's word on how a field is indexed (a ``scaled_float`` price, an extra
multi-field, ``dynamic: strict``) but not on what the documents hold: the documents come from the
schema, so a property the documents do not have, or a scalar column declared an object, is a
config error naming its key path, caught before any index is created rather than as a server
error in the middle of a job. Overrides merge key by key, except that a scalar field given another
``type`` is defined afresh by the override (the old type's analyzer or sub-fields would not fit).
Parameters inside a field (``format``, ``ignore_above`` ...) are the server's business and pass
through; field types are checked against the types the targets know.
"""

from __future__ import annotations

from typing import Any

from sparkindex.errors import ConfigError
from sparkindex.targets.field_types import CONTAINERS, KNOWN_TYPES


def field_paths(props: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, spec in props.items():
        out.append(prefix + name)
        if "properties" in spec:
            out.extend(field_paths(spec["properties"], f"{prefix}{name}."))
    return out


def merge_properties(
    props: dict[str, Any], overrides: dict[str, Any], where: str, root: dict[str, Any], reserved: frozenset[str]
) -> None:
    """Merge *overrides* (``properties`` of the override at key path *where*) into *props*.

    *root*: the top-level properties (``copy_to`` targets are added there, as ``fields`` does);
    *reserved*: top-level fields sparkindex declares itself (the join field).
    """
    for name, spec in overrides.items():
        here = f"{where}.{name}"
        if name not in props:
            known = ", ".join(sorted(field_paths(root)))
            raise ConfigError(f"{here}: no such field in the documents (fields: {known})")
        if props is root and name in reserved:
            raise ConfigError(f"{here}: {name!r} is the join field, which the join relations declare")
        if not isinstance(spec, dict):
            raise ConfigError(f"{here}: expected a mapping of field parameters (type, analyzer, ...)")
        node = props[name]
        _check_type(node, spec, here)
        if "properties" not in node and spec.get("type", node["type"]) != node["type"]:
            # A new type is a new definition: what was inferred or set by `fields` (an analyzer,
            # copy_to, sub-fields) was for the old type, and the engine would refuse it on this one.
            node.clear()
        for key, value in spec.items():
            if key == "properties":
                if "properties" not in node:
                    raise ConfigError(f"{here}.properties: {name!r} holds {node['type']} values, not objects")
                if not isinstance(value, dict):
                    raise ConfigError(f"{here}.properties: expected a mapping of field names")
                merge_properties(node["properties"], value, f"{here}.properties", root, reserved)
            elif key == "fields":
                node["fields"] = {**node.get("fields", {}), **_multi_fields(value, f"{here}.fields")}
            else:
                node[key] = value
                if key == "copy_to":
                    for target in [value] if isinstance(value, str) else list(value):
                        root.setdefault(str(target), {"type": "text"})


def _check_type(node: dict[str, Any], spec: dict[str, Any], here: str) -> None:
    if "type" not in spec:
        return
    kind = spec["type"]
    if kind == "join":
        raise ConfigError(f"{here}.type: declare parent-child documents with a relation of type: join")
    if kind not in KNOWN_TYPES:
        raise ConfigError(f"{here}.type: unknown field type {kind!r} (known: {', '.join(sorted(KNOWN_TYPES))})")
    if "properties" in node and kind not in CONTAINERS:
        raise ConfigError(f"{here}.type: this field holds a relation's objects; its type can be object or nested")
    if "properties" not in node and kind in CONTAINERS:
        raise ConfigError(f"{here}.type: this field holds a column's values, not objects; {kind} is for relations")


def _multi_fields(value: Any, here: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{here}: expected a mapping of sub-field names to their parameters")
    for sub, spec in value.items():
        if not isinstance(spec, dict) or "type" not in spec:
            raise ConfigError(f"{here}.{sub}: a multi-field needs a 'type'")
        kind = spec["type"]
        if kind not in KNOWN_TYPES or kind in CONTAINERS:
            raise ConfigError(f"{here}.{sub}.type: {kind!r} is not a type a multi-field can have")
    return value
