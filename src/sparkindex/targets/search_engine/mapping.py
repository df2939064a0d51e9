"""The planner's mapping and the index's settings, as an OpenSearch/Elasticsearch index body.

The planner already speaks this dialect (``documents/mapping.py``), so translation is mostly
completion: the sortable key and the content hash every document carries, the halves of its
range check (``_check_hi``, ``_check_lo``: longs with doc values and no index, since they are only
ever summed by aggregations; :mod:`sparkindex.checksums`), the marks of a soft
delete (``_deleted``, ``_deleted_at``), ``dynamic: strict``
(a document with a field the mapping does not know is rejected and dead-lettered, rather than
silently growing the mapping), date formats that take what the builder writes, and the index's
own settings remembered in ``_meta`` so that :meth:`finish_version` can restore them after the
bulk load ran with ``refresh_interval: -1`` and no replicas.
"""

from __future__ import annotations

import copy
from typing import Any

from sparkindex.checksums import CHECK_FIELDS
from sparkindex.errors import ConfigError
from sparkindex.targets.base import DELETED_AT_FIELD, DELETED_FIELD, HASH_FIELD, SORT_KEY_FIELD
from sparkindex.targets.field_types import KNOWN_TYPES

#: What the builder writes for DATE/DATETIME columns (orjson's ISO 8601: ``2024-05-01``,
#: ``2024-05-01T10:00:00``, with microseconds and/or an offset), the ``2024-05-01 10:00:00``
#: form a database may hand over as text, and epoch milliseconds.
DATE_FORMAT = "strict_date_optional_time||yyyy-MM-dd HH:mm:ss||yyyy-MM-dd HH:mm:ss.SSSSSS||epoch_millis"

#: Settings a bulk load runs with; restored to the index's own (or the defaults) afterwards.
BULK_LOAD_SETTINGS: dict[str, Any] = {"refresh_interval": "-1", "number_of_replicas": 0}

RESERVED_FIELDS = frozenset(
    {SORT_KEY_FIELD, HASH_FIELD, *CHECK_FIELDS, "_id", "_source", "_routing", "_index", "_meta"}
)

META_KEY = "sparkindex"

#: the types a field may have: what the planner accepts in overrides, plus the join field it declares
_KNOWN_TYPES = KNOWN_TYPES | {"join"}


def index_mapping(mapping: dict[str, Any], index: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The ``mappings`` body for *index*: the planner's mapping completed (see module doc)."""
    props = mapping.get("properties")
    if not isinstance(props, dict):
        raise ConfigError(f"index {index!r}: the mapping has no 'properties' object")
    clash = RESERVED_FIELDS & props.keys()
    if clash:
        raise ConfigError(
            f"index {index!r}: document field(s) {sorted(clash)} clash with fields sparkindex or the engine "
            "reserve; rename the column(s) in the pipeline's columns/relations"
        )
    out = {k: copy.deepcopy(v) for k, v in mapping.items() if k != "properties"}
    out["properties"] = {name: _field(spec, name, index) for name, spec in props.items()}
    out["properties"][SORT_KEY_FIELD] = {"type": "keyword"}
    out["properties"][HASH_FIELD] = {"type": "keyword"}
    for name in CHECK_FIELDS:
        out["properties"][name] = {"type": "long", "index": False}
    # a soft delete's marks (deletes: soft), declared on every index: under `dynamic: strict` a
    # tombstone is refused unless they are, and searches filter on them (a mapping that declares
    # them itself keeps its own)
    out["properties"].setdefault(DELETED_FIELD, {"type": "boolean"})
    out["properties"].setdefault(DELETED_AT_FIELD, {"type": "date", "format": DATE_FORMAT})
    out.setdefault("dynamic", "strict")
    out["_meta"] = {**out.get("_meta", {}), META_KEY: meta}
    return out


#: each engine's vector field type (an embedding a transform adds): the other's is refused by name
VECTOR_TYPE = {"OpenSearch": "knn_vector", "Elasticsearch": "dense_vector"}


def declares_checks(mapping: dict[str, Any]) -> bool:
    """Whether an index's mapping (as ``_mapping`` answers it) has the check fields: those created
    before sparkindex wrote checks do not, and refuse them (``dynamic: strict``)."""
    props = mapping.get("properties") or {}
    return all(name in props for name in CHECK_FIELDS)


def check_vector_types(mapping: dict[str, Any], engine: str, alias: str) -> None:
    """Refuse, before the index is created, the other engine's vector type: each engine answers
    only a generic mapping error for a type it does not have."""
    own = VECTOR_TYPE.get(engine)
    if own is None:
        return
    for path, spec in _walk(mapping.get("properties") or {}):
        kind = spec.get("type")
        if kind in VECTOR_TYPE.values() and kind != own:
            raise ConfigError(
                f"indexes[{alias}].mapping.properties.{path}.type: {kind!r} is not a type {engine} has; its vector "
                f"field type is {own!r}"
            )


def _walk(props: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for name, spec in props.items():
        if isinstance(spec, dict):
            out.append((prefix + name, spec))
            out.extend(_walk(spec.get("properties") or {}, f"{prefix}{name}."))
    return out


def _field(spec: Any, path: str, index: str) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ConfigError(f"index {index!r}: mapping of field {path!r} must be an object, got {spec!r}")
    out: dict[str, Any] = dict(spec)
    kind = out.get("type", "object" if "properties" in out else None)
    if kind is None:
        raise ConfigError(f"index {index!r}: field {path!r} has no type")
    if kind not in _KNOWN_TYPES:
        raise ConfigError(f"index {index!r}: field {path!r} has unknown type {kind!r}")
    if kind == "date":
        out.setdefault("format", DATE_FORMAT)
    if "properties" in out:
        if kind not in ("object", "nested"):
            raise ConfigError(f"index {index!r}: field {path!r} of type {kind!r} cannot have properties")
        out["properties"] = {k: _field(v, f"{path}.{k}", index) for k, v in out["properties"].items()}
    return out


def text_fields(mapping: dict[str, Any]) -> list[str]:
    """Dotted paths of the analysed text fields outside nested documents: what a plain query
    string searches (nested children need a nested query)."""
    out: list[str] = []

    def walk(props: dict[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            if not isinstance(spec, dict) or spec.get("type") == "nested":
                continue
            if spec.get("type") == "text" and spec.get("index", True) is not False:
                out.append(prefix + name)
            if isinstance(spec.get("properties"), dict):
                walk(spec["properties"], f"{prefix}{name}.")

    walk(mapping.get("properties", {}), "")
    return out


def normalize_settings(settings: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """The index's settings as one nested ``{"index": {...}}``-free dict: dotted keys expanded,
    an ``index.`` prefix or an ``index:`` level removed, so that the forms the engines accept
    (``number_of_replicas``, ``index.number_of_replicas``, ``{index: {number_of_replicas}}``)
    compare and merge alike."""
    out: dict[str, Any] = {}
    for key, value in (settings or {}).items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: setting names must be non-empty strings, got {key!r}")
        parts = key.split(".")
        if parts[0] == "index":
            parts = parts[1:]
        if not parts:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.index: expected a mapping of settings")
            _merge(out, normalize_settings(value, f"{where}.index"), where)
            continue
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}.{key}: conflicts with another setting")
        leaf = parts[-1]
        if isinstance(value, dict):
            _merge(node.setdefault(leaf, {}), normalize_settings(value, f"{where}.{key}"), where)
        elif leaf in node:
            raise ConfigError(f"{where}.{key}: given twice")
        else:
            node[leaf] = value
    return out


def _merge(into: dict[str, Any], other: dict[str, Any], where: str) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, f"{where}.{key}")
        elif key in into:
            raise ConfigError(f"{where}.{key}: given twice")
        else:
            into[key] = value


def creation_settings(user: dict[str, Any]) -> dict[str, Any]:
    """The index's own settings with the bulk-load ones over them."""
    return {"index": {**user, **BULK_LOAD_SETTINGS}}


def restored_settings(user: dict[str, Any]) -> dict[str, Any]:
    """What finish_version puts back: the index's own values of the bulk-load settings, or
    None, which resets a setting to the cluster's default."""
    return {"index": {key: user.get(key) for key in BULK_LOAD_SETTINGS}}
