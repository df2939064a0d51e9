"""Users' SQL inside a pipeline: row filters and computed fields, checked against the live database.

A filter (``where:``) or a computed field (``computed:``) is a fragment of SQL in the source's own
dialect. It is never parsed here: the database is asked to prepare it against the table, with no
row read, so an unknown column or a syntax error surfaces with the database's own message under
the config key that holds it (exit 2), at ``check`` and at plan time, before any work. A computed
field's type is the type the database gives the expression's result (PostgreSQL's result OID,
MySQL's field type; SQLite, whose values carry their own types, by the first non-NULL value), so
the inferred mapping types it as it types a column.

The fragments are embedded as literal SQL (:func:`literal_sql`), never as bound text: a ``:`` in a
string literal is not a parameter, and SQLAlchemy doubles ``%`` for the drivers that need it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.sources.base import Source, TableInfo, literal_sql


def _database_message(exc: DBAPIError) -> str:
    lines = [line for line in redact_url(str(exc.orig)).strip().splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc.orig).__name__


def check_filter(source: Source, info: TableInfo, fragment: str, where: str) -> None:
    """Refuse a row filter the database cannot evaluate over *info*'s rows (a ConfigError naming
    *where*, the config key, and the database's message)."""
    stmt = sa.select(sa.literal(1)).select_from(info.table).where(literal_sql(fragment)).limit(0)
    try:
        with source.engine.connect() as conn:
            conn.execute(stmt).all()
    except DBAPIError as exc:
        raise ConfigError(
            f"{where}: the row filter {fragment!r} is not valid SQL over table {info.name!r}: {_database_message(exc)}"
        ) from None


def _per_row(conn: sa.Connection, info: TableInfo, fragment: str, where: str) -> None:
    """Refuse an aggregate or a window function (``x / sum(x) OVER ()``): its value depends on
    other rows, which change capture never re-reads. Every dialect refuses both inside WHERE, so
    the expression is prepared there; the database's refusal is the answer."""
    try:
        conn.execute(sa.select(sa.literal(1)).select_from(info.table).where(literal_sql(fragment).is_(None)).limit(0))
    except DBAPIError as exc:
        conn.rollback()
        raise ConfigError(
            f"{where}: the expression {fragment!r} depends on other rows of table {info.name!r} (an aggregate or a "
            f"window function: {_database_message(exc)}); a computed field is a function of its row"
        ) from None


def expression_type(source: Source, info: TableInfo, fragment: str, where: str) -> sa.types.TypeEngine[Any]:
    """The type of *fragment*'s result over *info*'s rows, as the database reports it. Refuses an
    expression the database cannot evaluate, an aggregate (one row for the whole table, where a
    field needs one value per row) and a result no field type fits (a ConfigError naming *where*)."""
    try:
        with source.engine.connect() as conn:
            per_table = conn.execute(sa.select(literal_sql(fragment)).select_from(info.table).where(sa.false())).first()
            if per_table is not None:
                raise ConfigError(
                    f"{where}: the expression {fragment!r} aggregates the rows of table {info.name!r} (it gives a "
                    "value with no row at all); a computed field is one value per row"
                )
            _per_row(conn, info, fragment, where)
            found, name = source.result_type(conn, info, fragment)
    except DBAPIError as exc:
        raise ConfigError(
            f"{where}: the expression {fragment!r} is not valid SQL over table {info.name!r}: {_database_message(exc)}"
        ) from None
    if found is None:
        raise ConfigError(
            f"{where}: the expression {fragment!r} gives {name}, which no field type fits; CAST it to text, an "
            "integer, a floating-point number, a boolean, a date or a timestamp"
        )
    return found


__all__ = ["check_filter", "expression_type", "literal_sql"]
