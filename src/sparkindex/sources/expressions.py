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
from sparkindex.sources.base import Source, TableInfo


def literal_sql(fragment: str, type_: sa.types.TypeEngine[Any] | None = None) -> sa.ColumnElement[Any]:
    """*fragment* as a parenthesised SQL expression (its own precedence kept)."""
    return sa.literal_column(f"({fragment})", type_)


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


def expression_type(source: Source, info: TableInfo, fragment: str, where: str) -> sa.types.TypeEngine[Any]:
    """The type of *fragment*'s result over *info*'s rows, as the database reports it; refuses an
    expression the database cannot evaluate (a ConfigError naming *where* and its message)."""
    try:
        with source.engine.connect() as conn:
            found = source.result_type(conn, info, literal_sql(fragment))
    except DBAPIError as exc:
        raise ConfigError(
            f"{where}: the expression {fragment!r} is not valid SQL over table {info.name!r}: {_database_message(exc)}"
        ) from None
    return found if found is not None else sa.Text()


__all__ = ["check_filter", "expression_type", "literal_sql"]
