"""MySQL / MariaDB: unbuffered (server-side) cursors for pages; keys split by one index walk.

MySQL has no TABLESAMPLE; walking the primary key index once (InnoDB keeps it clustered, and the
walk reads only key columns) gives exact boundaries in a single scan.
"""

from __future__ import annotations

from typing import Any

from sparkindex.sources.base import Source


class MysqlSource(Source):
    max_in_params = 5000

    def engine_options(self) -> dict[str, Any]:
        return {"pool_pre_ping": True, "pool_recycle": 1800}

    def page_options(self) -> dict[str, Any]:
        return {"stream_results": True, "yield_per": 5000}
