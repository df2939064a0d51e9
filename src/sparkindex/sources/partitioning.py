"""Splitting a table's key space into ranges of about equal row counts.

Integer keys are split arithmetically between min and max (no scan). Any other orderable key
(strings, UUIDs, composite keys) is split by walking the key index once and keeping every n-th key:
one index-only scan in all, never a scan per boundary. The first and last ranges are open, so rows
inserted beyond the old extremes while a job runs still land in a partition.

Boundaries always stay in the order the database returned them. The database compares keys under
the column's collation (ICU, case- or accent-insensitive, ...), which Python's ``sorted`` does not
know: boundaries re-sorted in Python make ranges that overlap (rows read twice) or leave gaps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from sparkindex.sources.base import KeyRange, TableInfo

if TYPE_CHECKING:
    from sparkindex.sources.base import Source


T = TypeVar("T")


def distinct_in_order(boundaries: Sequence[T]) -> list[T]:
    """Drop repeated boundaries (which would make empty ranges) without reordering the rest."""
    return list(dict.fromkeys(boundaries))


def integer_ranges(lo: int, hi: int, parts: int) -> list[KeyRange]:
    parts = max(1, parts)
    span = hi - lo + 1
    step = max(1, math.ceil(span / parts))
    bounds = list(range(lo - 1, hi, step))[1:]
    edges: list[int | None] = [None, *bounds, None]
    return [KeyRange(None if a is None else (a,), None if b is None else (b,)) for a, b in itertools.pairwise(edges)]


def ranges_from_boundaries(boundaries: Sequence[tuple[object, ...]]) -> list[KeyRange]:
    edges: list[tuple[object, ...] | None] = [None, *boundaries, None]
    return [KeyRange(a, b) for a, b in itertools.pairwise(edges)]


def split_by_range_or_walk(
    source: Source, info: TableInfo, key: Sequence[str], size: int, limit: int
) -> list[KeyRange]:
    total = source.count(info)
    parts = min(limit, max(1, math.ceil(total / size)))
    if parts <= 1:
        return [KeyRange(None, None)]
    col = info.columns[key[0]]
    if len(key) == 1 and isinstance(col.type, sa.Integer):
        lo, hi = source.key_extent(info, key[0])
        if lo is None or hi is None:
            return [KeyRange(None, None)]
        return integer_ranges(int(lo), int(hi), parts)
    every = math.ceil(total / parts)
    boundaries = [k for i, k in enumerate(source.walk_keys(info, key), start=1) if i % every == 0 and i < total]
    return ranges_from_boundaries(distinct_in_order(boundaries))
