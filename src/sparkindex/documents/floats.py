"""Where a document holds floating-point values, and the two things both builders do with them.

JSON has no NaN or infinity: orjson writes them as ``null`` and PostgreSQL's ``json_build_object``
as the strings ``"NaN"``/``"Infinity"``. Either way the index would silently hold another value
than the source (and the two builders would disagree on its hash), so a document carrying one is
reported as a :class:`~sparkindex.errors.DocumentError` instead. PostgreSQL also writes 214.0 as
214, which :func:`restore_floats` undoes so hashes equal the Python builder's.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import sqlalchemy as sa

from sparkindex.documents.plan import RelationPlan
from sparkindex.sources.base import TableInfo

#: (float columns of this level, relation name -> the same for the related documents)
FloatPaths = tuple[frozenset[str], dict[str, "FloatPaths"]]

_NON_FINITE_TEXT = frozenset({"NaN", "Infinity", "-Infinity"})


#: the paths of a document known to hold no NaN or infinity: nothing to walk
NO_FLOATS: FloatPaths = (frozenset(), {})


def float_columns(table: TableInfo, emit: Sequence[str]) -> frozenset[str]:
    return frozenset(c for c in emit if isinstance(table.columns[c].type, sa.Float | sa.Numeric))


def float_paths(table: TableInfo, emit: Sequence[str], relations: Sequence[RelationPlan]) -> FloatPaths:
    """The float columns of this level and of the relations below it. Relations without a float
    column anywhere beneath them are left out, so that checking a document never walks children
    that cannot hold one (the walk was about a fifth of building time on the large documents)."""
    floats = float_columns(table, emit)
    children = {r.name: float_paths(r.rows, r.emit, r.children) for r in relations}
    return floats, {name: sub for name, sub in children.items() if sub[0] or sub[1]}


def finite_columns(rows: Sequence[Sequence[Any]], positions: Sequence[int]) -> bool:
    """True only if no value at *positions* of *rows* can be NaN or infinite, checked a page at a
    time so that the per-document walk (:func:`non_finite_path`) runs only where one may hide.

    The sum of a column is NaN or infinite if any of its values is, so a finite sum clears the
    column. The check may only err the safe way: a sum that overflows, or values it cannot add
    (text, Decimal beside float, a signalling NaN), answer False and leave the verdict to the walk.
    """
    try:
        for i in positions:
            # filter(None, ...) drops the NULLs (and zeros, which add nothing): the walk stays in C
            if not math.isfinite(sum(filter(None, map(itemgetter(i), rows)))):
                return False
    except (TypeError, ArithmeticError, ValueError):  # ArithmeticError: overflow, Decimal signals
        return False
    return True


def finite_level(rows: Sequence[Sequence[Any]], table: TableInfo, emit: Sequence[str], pos: dict[str, int]) -> bool:
    """:func:`finite_columns` over the float columns one level (a relation's rows) emits."""
    return finite_columns(rows, [pos[c] for c in float_columns(table, emit)])


def _items(doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    return value if isinstance(value, list) else [value]


def restore_floats(doc: dict[str, Any], paths: FloatPaths) -> None:
    """Integral numbers in float columns back to floats (PostgreSQL's JSON drops the ``.0``)."""
    floats, children = paths
    for name in floats:
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            doc[name] = float(value)
    for name, sub in children.items():
        for item in _items(doc, name):
            if isinstance(item, dict):
                restore_floats(item, sub)


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, decimal.Decimal):
        return not value.is_finite()
    return isinstance(value, str) and value in _NON_FINITE_TEXT


def non_finite_path(doc: dict[str, Any], paths: FloatPaths, prefix: str = "") -> str | None:
    """The dotted path of the first NaN or infinite value in a float column, or None."""
    floats, children = paths
    for name in floats:
        if _non_finite(doc.get(name)):
            return prefix + name
    for name, sub in children.items():
        for item in _items(doc, name):
            if isinstance(item, dict):
                found = non_finite_path(item, sub, f"{prefix}{name}.")
                if found is not None:
                    return found
    return None


def non_finite_anywhere(value: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite float anywhere in *value* (a transform may
    add fields of any shape, where the plan's float paths know nothing), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path or "(document)"
    if isinstance(value, dict):
        for name, item in value.items():
            found = non_finite_anywhere(item, f"{path}.{name}" if path else str(name))
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = non_finite_anywhere(item, path)
            if found is not None:
                return found
    return None
