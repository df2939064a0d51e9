"""SQLite: a file, many reader processes, row values for composite keyset pages (SQLite >= 3.15)."""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from sparkindex.sources.base import Source, TableInfo, literal_sql

#: SQLite's storage classes, as ``typeof()`` names them
_STORAGE_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "integer": sa.BigInteger(),
    "real": sa.Float(),
    "text": sa.Text(),
}


class SqliteSource(Source):
    max_in_params = 900

    def engine_options(self) -> dict[str, Any]:
        # A reader must wait for a concurrent writer rather than fail with "database is locked",
        # but not for ever: SQLite's only statement timeout is this busy timeout.
        return {"connect_args": {"timeout": self.statement_timeout_s}}

    def result_type(
        self, conn: sa.Connection, info: TableInfo, fragment: str
    ) -> tuple[sa.types.TypeEngine[Any] | None, str]:
        """SQLite values carry their own types, so a type is read from the SQL where it can be: a
        column's declared type, or a ``CAST``'s (SQLite's affinity rules on the type's name).
        Otherwise the storage class of the expression's first non-NULL value, which depends on
        the data (text when the table holds none): write a ``CAST`` to pin it."""
        expression = literal_sql(fragment)
        conn.execute(sa.select(expression).select_from(info.table).limit(0)).all()  # prepared: checked
        bare = fragment.strip().strip('"`[]')
        if bare in info.columns:
            return info.columns[bare].type, str(info.columns[bare].type)
        cast = _CAST.fullmatch(fragment)
        if cast is not None and _closes_at_end(fragment, fragment.index("(")):
            declared = cast.group(1)
            return _affinity(declared), declared
        found = conn.execute(
            sa.select(sa.func.typeof(expression)).select_from(info.table).where(expression.is_not(None)).limit(1)
        ).scalar()
        if found is None:
            return sa.Text(), "no value (an empty table: typed as text)"
        return _STORAGE_TYPES.get(str(found)), str(found)


#: ``CAST(<anything> AS <type name>)``, the whole expression
_CAST = re.compile(r"\s*CAST\s*\(.*\s+AS\s+([A-Za-z][A-Za-z ]*(?:\(\s*\d+\s*(?:,\s*\d+\s*)?\))?)\s*\)\s*", re.I | re.S)


def _affinity(declared: str) -> sa.types.TypeEngine[Any] | None:
    """SQLite's column affinity of a declared type name (its documented rules, in their order)."""
    name = declared.upper()
    if "INT" in name:
        return sa.BigInteger()
    if any(part in name for part in ("CHAR", "CLOB", "TEXT")):
        return sa.Text()
    if "BLOB" in name:
        return None
    if any(part in name for part in ("REAL", "FLOA", "DOUB")):
        return sa.Float()
    return sa.Numeric()  # NUMERIC affinity: an integer or a real, whichever the value is


def _closes_at_end(text: str, opening: int) -> bool:
    """Whether the parenthesis at *opening* closes at *text*'s last one: ``CAST(a AS TEXT) ||
    CAST(b AS INTEGER)`` also starts with a CAST and ends with ``AS <type>)``, but is no CAST."""
    depth, quote = 0, ""
    for i in range(opening, len(text)):
        char = text[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return not text[i + 1 :].strip()
    return False
