"""MySQL / MariaDB: unbuffered (server-side) cursors for pages; keys split by one index walk.

MySQL has no TABLESAMPLE; walking the primary key index once (InnoDB keeps it clustered, and the
walk reads only key columns) gives exact boundaries in a single scan.
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

    def column_reflect(self, inspector: Any, table: sa.Table, column_info: dict[str, Any]) -> None:
        col_type = column_info["type"]
        if isinstance(col_type, mysql.TINYINT) and col_type.display_width == 1:
            column_info["type"] = sa.Boolean()  # BOOLEAN is stored as TINYINT(1)
        elif isinstance(col_type, sa.Float) and col_type.asdecimal:
            col_type.asdecimal = False  # DOUBLE read as Decimal is rounded to 10 places

    def page_options(self) -> dict[str, Any]:
        return {"stream_results": True, "yield_per": 5000}
