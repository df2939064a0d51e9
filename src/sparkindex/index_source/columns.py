"""An index's documents as typed Arrow columns, the types taken from the index's mapping.

The mapping is the only schema an index has, so a DataFrame read back is typed by it: text and
keyword are strings, long and double numbers, dates UTC timestamps, objects structs and nested
fields lists of structs. An object or nested field declared without properties (a JSON column)
has no fixed shape and arrives as JSON text. Fields that only receive ``copy_to`` values never
appear in a document's source, so they are left out. A value that does not fit its field's type
stops the read with an error naming the document and the field: silently nulling it would
make the DataFrame lie about the index.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from sparkindex.errors import ConfigError, PermanentError
from sparkindex.targets.base import StoredDocument

#: The document id, the first column of every DataFrame read back.
ID_COLUMN = "_id"

Convert = Callable[[Any, str], Any]

_INTEGERS = {"long", "integer", "short", "byte", "unsigned_long"}
_FLOATS = {"double", "float", "half_float", "scaled_float"}
_STRINGS = {"text", "keyword", "match_only_text", "wildcard", "constant_keyword", "ip"}


class ValueMismatch(PermanentError):
    """A stored value does not fit the type its field has in the mapping."""


def _fail(value: Any, path: str, expected: str) -> ValueMismatch:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return ValueMismatch(f"field {path!r} holds {type(value).__name__} {shown}; the mapping says {expected}")


def _string(value: Any, path: str) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _integer(value: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _fail(value, path, "an integer")


def _float(value: Any, path: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise _fail(value, path, "a number")


def _boolean(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    raise _fail(value, path, "a boolean")


def _timestamp(value: Any, path: str) -> dt.datetime:
    """ISO 8601 text (naive means UTC, as the targets index it) or epoch milliseconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            raise _fail(value, path, "a date (ISO 8601 or epoch milliseconds)") from None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
    raise _fail(value, path, "a date (ISO 8601 or epoch milliseconds)")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    convert: Convert


def _struct(columns: Sequence[Column]) -> Convert:
    def convert(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(value, path, "an object")
        return {c.name: _convert(c, value.get(c.name), f"{path}.{c.name}") for c in columns}

    return convert


def _list_of(inner: Convert) -> Convert:
    def convert(value: Any, path: str) -> list[Any]:
        items = value if isinstance(value, list) else [value]  # a lone object is a list of one
        return [None if v is None else inner(v, f"{path}[{i}]") for i, v in enumerate(items)]

    return convert


def _convert(column: Column, value: Any, path: str) -> Any:
    return None if value is None else column.convert(value, path)


def _scalar(kind: str) -> tuple[pa.DataType, Convert]:
    if kind in _STRINGS:
        return pa.string(), _string
    if kind in _INTEGERS:
        return pa.int64(), _integer
    if kind in _FLOATS:
        return pa.float64(), _float
    if kind == "boolean":
        return pa.bool_(), _boolean
    if kind in ("date", "date_nanos"):
        return pa.timestamp("us", tz="UTC"), _timestamp
    return pa.string(), _string  # geo points, ranges and the like: their JSON


def column_of(name: str, spec: dict[str, Any], where: str) -> Column:
    kind = spec.get("type", "object" if "properties" in spec else "keyword")
    props = spec.get("properties")
    if kind in ("object", "nested"):
        if not props:
            return Column(name, pa.string(), _string)
        members = [column_of(n, s, f"{where}.{n}") for n, s in props.items()]
        struct = pa.struct([pa.field(c.name, c.type) for c in members])
        if kind == "nested":
            return Column(name, pa.list_(struct), _list_of(_struct(members)))
        return Column(name, struct, _struct(members))
    arrow_type, convert = _scalar(str(kind))
    return Column(name, arrow_type, convert)


def copy_targets(props: dict[str, Any]) -> set[str]:
    """Top-level fields that other fields (at any depth) copy their values into."""
    found: set[str] = set()
    for spec in props.values():
        found.update(spec.get("copy_to", []))
        found.update(copy_targets(spec.get("properties", {})))
    return found


def source_fields(mapping: dict[str, Any]) -> list[str]:
    """The top-level fields documents hold in their source, in the mapping's order."""
    props: dict[str, Any] = mapping.get("properties", {})
    skip = copy_targets(props)
    return [name for name in props if name not in skip]


@dataclass(frozen=True)
class DocumentColumns:
    """The DataFrame shape of an index: ``_id`` and the chosen top-level fields."""

    columns: tuple[Column, ...]

    @classmethod
    def of(cls, mapping: dict[str, Any], fields: Sequence[str] | None, where: str) -> DocumentColumns:
        known = source_fields(mapping)
        chosen = list(known) if fields is None else list(dict.fromkeys(fields))
        unknown = [f for f in chosen if f not in known]
        if unknown:
            raise ConfigError(f"{where}: no field {', '.join(map(repr, unknown))} in the index (fields: {known})")
        if ID_COLUMN in chosen:
            raise ConfigError(f"{where}: the index has a field named {ID_COLUMN!r}, which the document id takes")
        props = mapping["properties"]
        return cls(tuple(column_of(name, props[name], f"{where}.{name}") for name in chosen))

    @property
    def fields(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(ID_COLUMN, pa.string(), nullable=False)] + [(c.name, c.type) for c in self.columns])

    def batch(self, docs: Iterable[StoredDocument]) -> pa.RecordBatch:
        ids: list[str] = []
        values: list[list[Any]] = [[] for _ in self.columns]
        for doc in docs:
            ids.append(doc.id)
            try:
                for column, out in zip(self.columns, values, strict=True):
                    out.append(_convert(column, doc.source.get(column.name), column.name))
            except ValueMismatch as exc:
                raise ValueMismatch(f"document {doc.id!r}: {exc}") from None
        arrays = [pa.array(ids, pa.string())] + [pa.array(v, c.type) for c, v in zip(self.columns, values, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
