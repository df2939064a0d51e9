"""SQLite: a file, many reader processes, row values for composite keyset pages (SQLite >= 3.15)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sparkindex.sources.base import Source, TableInfo

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
        self, conn: sa.Connection, info: TableInfo, expression: sa.ColumnElement[Any]
    ) -> sa.types.TypeEngine[Any] | None:
        """SQLite values carry their own types: the storage class of the expression's first
        non-NULL value (text when the table holds none, or for blobs)."""
        conn.execute(sa.select(expression).select_from(info.table).limit(0)).all()  # prepared: checked
        found = conn.execute(
            sa.select(sa.func.typeof(expression)).select_from(info.table).where(expression.is_not(None)).limit(1)
        ).scalar()
        return _STORAGE_TYPES.get(str(found)) if found is not None else None
