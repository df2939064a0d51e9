"""MySQL / MariaDB: unbuffered (server-side) cursors for pages; keys split by one index walk.

MySQL has no TABLESAMPLE; walking the primary key index once (InnoDB keeps it clustered, and the
walk reads only key columns) gives exact boundaries in a single scan, in the server's own
collation order (a case- or accent-insensitive collation sorts unlike Python, so boundaries are
never re-sorted here).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from sparkindex.sources.base import Source

#: Result types of computed fields, by the protocol's field type codes (MySQLdb.constants.FIELD_TYPE;
#: the others, strings among them, are sized by the column's length below).
_RESULT_TYPES: dict[int, sa.types.TypeEngine[Any]] = {
    **dict.fromkeys((1, 2, 3, 8, 9, 13), sa.BigInteger()),  # TINY, SHORT, LONG, LONGLONG, INT24, YEAR
    4: sa.Float(),  # FLOAT
    5: sa.Float(precision=53),  # DOUBLE
    **dict.fromkeys((0, 246), sa.Numeric()),  # DECIMAL, NEWDECIMAL
    **dict.fromkeys((7, 12), sa.DateTime()),  # TIMESTAMP, DATETIME
    **dict.fromkeys((10, 14), sa.Date()),  # DATE, NEWDATE
    245: sa.JSON(),
}
#: VARCHAR, VAR_STRING, STRING: sized
_SIZED_STRINGS = frozenset({15, 253, 254})
#: TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB: what TEXT results come as too (unbounded: text)
_BLOBS = frozenset({249, 250, 251, 252})


class MysqlSource(Source):
    max_in_params = 5000

    def engine_options(self) -> dict[str, Any]:
        return {"pool_pre_ping": True, "pool_recycle": 1800}

    def session_setup(self, dbapi_conn: Any) -> None:
        """The statement timeout: MariaDB's ``max_statement_time`` (seconds), else MySQL's (ms, SELECT only)."""
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute("SELECT VERSION()")
            (version,) = cursor.fetchone()
            if "mariadb" in str(version).lower():
                cursor.execute(f"SET SESSION max_statement_time = {float(self.statement_timeout_s)!r}")
            else:
                cursor.execute(f"SET SESSION max_execution_time = {int(self.statement_timeout_s * 1000)}")
        finally:
            cursor.close()

    def column_reflect(self, inspector: Any, table: sa.Table, column_info: dict[str, Any]) -> None:
        col_type = column_info["type"]
        if isinstance(col_type, mysql.TINYINT) and col_type.display_width == 1:
            column_info["type"] = sa.Boolean()  # BOOLEAN is stored as TINYINT(1)
        elif isinstance(col_type, sa.Float) and col_type.asdecimal:
            col_type.asdecimal = False  # DOUBLE read as Decimal is rounded to 10 places

    def described_type(self, conn: sa.Connection, column: Any) -> tuple[sa.types.TypeEngine[Any] | None, str]:
        """By the protocol's field type. A string result keeps its length: the server reports it
        in bytes, which bounds the characters from above whatever the character set, so a result
        short enough in bytes maps to a keyword as a short VARCHAR column does, never the reverse."""
        code, size = column[1], column[3]
        name = f"field type {code}"
        if code in _RESULT_TYPES:
            return _RESULT_TYPES[code], name
        if code in _SIZED_STRINGS:
            return (sa.String(size) if isinstance(size, int) and size > 0 else sa.Text()), name
        if code in _BLOBS:
            return sa.Text(), name
        return None, name

    def page_options(self) -> dict[str, Any]:
        return {"stream_results": True, "yield_per": 5000}
