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

    def page_options(self) -> dict[str, Any]:
        return {"stream_results": True, "yield_per": 5000}
