"""The rules a document's keys obey: an id the database keeps unique and non-NULL, and a version
column holding integers or date/times. The reindex's plan, ``check`` and polling change capture
apply the same functions, so each refuses exactly what the others would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from sparkindex.errors import ConfigError
from sparkindex.sources.base import TableInfo


def check_version_column(table: TableInfo, column: str, where: str) -> None:
    """A version column must exist and hold integers or date/times (see :mod:`.versions`)."""
    table.require_columns([column], where)
    col_type = table.columns[column].type
    integral = isinstance(col_type, sa.Numeric) and not isinstance(col_type, sa.Float) and col_type.scale == 0
    usable = isinstance(col_type, sa.Integer | sa.DateTime | sa.Date) or integral
    if isinstance(col_type, sa.Boolean) or not usable:
        raise ConfigError(
            f"{where}: column {column!r} of table {table.name!r} is {type_name(col_type)}; a version must be an "
            "integer or a date/time column (integers are used as they are, date/times as microseconds since "
            "1970-01-01 UTC)"
        )


def type_name(col_type: sa.types.TypeEngine[Any]) -> str:
    """A column type as SQL names it, or its class name where it cannot render without its dialect."""
    try:
        return str(col_type)
    except Exception:  # noqa: BLE001 - a dialect type that cannot render without its dialect
        return type(col_type).__name__


def check_unique_id(table: TableInfo, id_columns: Sequence[str], where: str) -> None:
    """Refuse ``id:`` columns the database does not keep unique and non-NULL.

    Rows sharing an id overwrite each other's document, and keyset paging (``key > after``)
    skips every row that shares a page's last key; a NULL key is never ``> after`` at all, so
    such rows are never read. Both losses would be silent, so the config is refused instead.
    The primary key's columns count as non-NULL (SQLite alone lets some hold NULL, a legacy quirk).
    """
    ids = set(id_columns)
    names = ", ".join(repr(c) for c in id_columns)
    nullable = [c for c in id_columns if table.columns[c].nullable and c not in table.primary_key]
    if nullable:
        raise ConfigError(
            f"{where}: column(s) {', '.join(repr(c) for c in nullable)} of table {table.name!r} may hold NULL; "
            "rows with a NULL id would never be read. Declare them NOT NULL or use the primary key "
            f"({', '.join(table.primary_key) or 'none'})"
        )
    keys = [table.primary_key, *table.unique_keys] if table.primary_key else list(table.unique_keys)
    if not any(key and set(key) <= ids for key in keys):
        known = "; ".join(f"({', '.join(k)})" for k in keys) or "none"
        raise ConfigError(
            f"{where}: column(s) {names} of table {table.name!r} are not unique (no primary key, unique "
            "constraint or unique index covers them); rows sharing an id would overwrite each other "
            f"and keyset paging would skip rows. Unique column sets of {table.name!r}: {known}"
        )
