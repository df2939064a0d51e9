"""External versions: the number a search engine compares so that an older write never wins.

``indexes[].version`` names a column of the root table (and ``version`` on a join relation one
of the child table). Its value in each row becomes the document's version, which a search-engine
target writes with ``version_type=external_gte``: the index keeps a document unless the write
carries the same or a higher version. The rule, the same for every builder and every database:

* integers (and NUMERIC columns without decimals) are used as they are;
* date/times become microseconds since 1970-01-01 00:00 UTC; a value without a time zone (SQLite
  text, MySQL ``DATETIME``, PostgreSQL ``timestamp``) is read as UTC, so versions follow the wall
  clock the database writes (a column written in a local time zone may step back an hour when
  daylight saving ends: prefer ``timestamptz`` or an integer row version); a date is its midnight;
* a version must lie between 0 and 2**63 - 1 (what the engines accept): a negative integer or a
  date/time before 1970 cannot be indexed, nor can NULL, nor a value of another type (SQLite
  columns may hold anything). Each is a :class:`~sparkindex.errors.DocumentError` for its row,
  which goes to the dead letters like any document that cannot be indexed.

Equal versions are accepted (``external_gte``), so rebuilding an unchanged row rewrites it. The
embedded Tantivy target has no versions and ignores them: a full reindex writes every row once into
a fresh index version, where there is nothing older to protect; change capture, which feeds log
positions through the same field, needs a target that honours them.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from sparkindex.errors import DocumentError

MAX_VERSION = 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _micros(value: dt.datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def external_version(doc_id: str, column: str, value: Any) -> int | DocumentError:
    """The external version of the document *doc_id* whose *column* holds *value*, or why it has none."""
    if value is None:
        return DocumentError(doc_id, f"version column {column!r} is NULL: no version to write", "NullVersion")
    if isinstance(value, bool):
        version: int | None = None
    elif isinstance(value, int):
        version = value
    elif isinstance(value, decimal.Decimal) and value.is_finite() and value == value.to_integral_value():
        version = int(value)
    elif isinstance(value, dt.datetime):
        version = _micros(value)
    elif isinstance(value, dt.date):
        version = _micros(dt.datetime(value.year, value.month, value.day))
    else:
        version = None
    if version is None:
        return DocumentError(
            doc_id,
            f"version column {column!r} holds {value!r} ({type(value).__name__}), neither an integer nor a date/time",
            "BadVersion",
        )
    if not 0 <= version <= MAX_VERSION:
        return DocumentError(
            doc_id,
            f"version column {column!r} holds {value!r}, version {version}; versions must lie between 0 and "
            f"{MAX_VERSION} (date/times count microseconds since 1970-01-01 UTC)",
            "BadVersion",
        )
    return version
