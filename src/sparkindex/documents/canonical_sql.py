"""A document's canonical JSON written by PostgreSQL itself, for the types whose text it can promise.

Why: the in-database builder used to receive ``json_build_object`` output and make it canonical
in Python (decode, floats restored, encode with sorted keys). On the large benchmark documents
(2.4 KB of mixed-script text) the decode alone was 25 us of the 60 us of client CPU a document
took, and the encode another 7: half of the pipeline's own cost. Here the statement writes the
bytes :func:`~sparkindex.documents.hashing.dumps_document` would have made from that output:

- keys in sorted order, compact separators (``{"a":1,"b":[{...},{...}]}``);
- integers as their digits, booleans, and text, dates, times and UUIDs through ``to_json`` (the
  very function ``json_build_object`` applies, whose string escapes are orjson's: ``\\"``,
  ``\\\\``, ``\\b\\f\\n\\r\\t``, ``\\u00XX`` for other control characters, nothing else);
- floating-point values as the shortest round-trip digits (``extra_float_digits=1``, set on every
  source connection), with ``.0`` on integral ones, exactly as orjson writes the same double; a
  zero (either sign) as ``0.0``; numeric through its nearest double, as the decoder read it
  (domains are reflected as their base types).

The bytes are UTF-8 because every source connection sets ``client_encoding=UTF8``.

A value those rules cannot promise (NaN, infinities, floats PostgreSQL writes with an exponent:
below 1e-4, from 1e15 for double precision and 1e6 for real) is written as PostgreSQL's own JSON
behind the byte ``\\x01``, which canonical JSON never holds raw (control characters are always
escaped). Such a document takes the decoding path, which reports NaN and infinities, and
normalises the rest, as before. A plan with a column of any other type (json, arrays, bytea,
intervals, ...) keeps the decoding path for all its documents.

The statement is also cheaper for PostgreSQL than ``json_build_object`` (COPY of 100k large
documents, both statements in one run: 23.6-24.1k docs/s against 21.9-22.2k). The document is
the statement's only ``text`` column, which the builder's cursor loads as bytes (``bytea`` would
cost its hex encoding: 19k).
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.documents.plan import RelationPlan
from sparkindex.sources.base import TableInfo

#: Precedes a value whose canonical text PostgreSQL cannot promise (see the module's doc).
SLOW_MARK = b"\x01"
_MARK = SLOW_MARK.decode("ascii")

#: Smallest magnitude PostgreSQL writes without an exponent (and orjson too).
_FIXED_FROM = 1e-4
#: From here PostgreSQL writes an exponent: ``float8out`` at 15 digits, ``float4out`` at 6.
_FIXED_BELOW = {"double": 1e15, "real": 1e6}


class Unsupported(Exception):
    """A column type outside the rules: the plan keeps the decoding path."""


def _text(value: str) -> Any:
    return sa.literal(value, sa.Text)


def _value(table: Any, info: TableInfo, name: str) -> Any:
    col = table.c[name]
    kind = info.columns[name].type  # a domain reflects as its base type (PostgresSource)
    if isinstance(kind, sa.Boolean | sa.String | sa.Date | sa.DateTime | sa.Time | sa.Uuid):
        return sa.cast(sa.func.to_json(col), sa.Text)
    if isinstance(kind, sa.Integer):
        return sa.cast(col, sa.Text)
    if isinstance(kind, sa.Float):
        return _float(col, col, _FIXED_BELOW["real" if isinstance(kind, sa.REAL) else "double"])
    if isinstance(kind, sa.Numeric):
        # Only a numeric a double can hold is cast (1e400 or 1e-400 would fail the statement):
        # the test is on the numeric itself, with numeric bounds (NaN and infinities fail it).
        magnitude = sa.func.abs(col)
        castable = sa.and_(
            magnitude < sa.literal(decimal.Decimal(_FIXED_BELOW["double"]), sa.Numeric),
            sa.or_(col == 0, magnitude >= sa.literal(decimal.Decimal(str(_FIXED_FROM)), sa.Numeric)),
        )
        double = _float(sa.cast(col, sa.Float(precision=53)), col, _FIXED_BELOW["double"])
        return sa.case((castable, double), else_=_marked(col))
    raise Unsupported(f"{info.name}.{name}: {kind!r}")


def _float(number: Any, original: Any, fixed_below: float) -> Any:
    """*number*'s canonical text, or the mark and PostgreSQL's JSON of *original*."""
    text = sa.cast(number, sa.Text)
    magnitude = sa.func.abs(number)
    in_range = sa.and_(magnitude >= _FIXED_FROM, magnitude < fixed_below)  # false for NaN, infinities
    return sa.case(
        (number == 0, _text("0.0")),  # -0 as well: the decoder reads "-0" as the integer 0
        (sa.and_(in_range, number == sa.func.trunc(number)), text + _text(".0")),
        (in_range, text),
        else_=_marked(original),
    )


def _marked(original: Any) -> Any:
    """The mark, then PostgreSQL's own JSON of the value (the decoding path's input)."""
    return _text(_MARK) + sa.cast(sa.func.to_json(original), sa.Text)


def _key(name: str, first: bool) -> Any:
    return _text(("{" if first else ",") + orjson.dumps(name).decode() + ":")


def canonical_object(table: Any, info: TableInfo, emit: Sequence[str], relations: Sequence[RelationPlan]) -> Any:
    """The canonical JSON text of one row of *table* (an alias of *info*'s table) with its
    embedded relations; raises :class:`Unsupported` for a type outside the rules."""
    fields: dict[str, Any] = {}
    for name in emit:
        fields[name] = sa.func.coalesce(_value(table, info, name), _text("null"))
    for rel in relations:  # never named like a column (plan.resolve_index refuses that)
        child = rel.rows.table.alias()
        cond = sa.and_(*[child.c[r] == table.c[lc] for lc, r in zip(rel.local_key, rel.remote_key, strict=True)])
        obj = canonical_object(child, rel.rows, rel.emit, rel.children)
        order = [child.c[c] for c in rel.order_by]
        if rel.kind == "object":
            sub = sa.select(obj).where(cond).order_by(*order).limit(1).scalar_subquery()
            fields[rel.name] = sa.func.coalesce(sub, _text("null"))
        else:
            agg = sa.func.string_agg(obj, _text(",")).aggregate_order_by(*order)
            inner = sa.select(_text("[") + agg + _text("]")).where(cond).scalar_subquery()
            fields[rel.name] = sa.func.coalesce(inner, _text("[]"))
    if not fields:
        return _text("{}")
    parts: list[Any] = []
    for i, name in enumerate(sorted(fields)):
        parts += [_key(name, i == 0), fields[name]]
    parts.append(_text("}"))
    return _concat(parts)


#: ``concat`` takes at most 100 arguments (FUNC_MAX_ARGS); wider documents nest it.
_CONCAT_ARGS = 90


def _concat(parts: list[Any]) -> Any:
    while len(parts) > _CONCAT_ARGS:
        parts = [sa.func.concat(*parts[i : i + _CONCAT_ARGS]) for i in range(0, len(parts), _CONCAT_ARGS)]
    return sa.func.concat(*parts)


def canonical_document(root: Any, info: TableInfo, emit: Sequence[str], relations: Sequence[RelationPlan]) -> Any:
    """The root row's canonical JSON as text, or None when a type keeps the decoding path."""
    return canonical_document_or_reason(root, info, emit, relations)[0]


def canonical_document_or_reason(
    root: Any, info: TableInfo, emit: Sequence[str], relations: Sequence[RelationPlan]
) -> tuple[Any, str | None]:
    """:func:`canonical_document`, or None and the column whose type keeps the decoding path
    (``sparkindex explain`` says which)."""
    try:
        text = canonical_object(root, info, emit, relations)
    except Unsupported as exc:
        return None, f"column {exc} has a type whose JSON text PostgreSQL cannot write canonically"
    return sa.cast(text, sa.Text).label("doc"), None  # text even when it is a bare literal ("{}")
