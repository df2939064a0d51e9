"""SQLite: a file, many reader processes, row values for composite keyset pages (SQLite >= 3.15)."""

from __future__ import annotations

from typing import Any

from sparkindex.sources.base import Source


class SqliteSource(Source):
    max_in_params = 900

    def engine_options(self) -> dict[str, Any]:
        # A reader must wait for a concurrent writer rather than fail with "database is locked",
        # but not for ever: SQLite's only statement timeout is this busy timeout.
        return {"connect_args": {"timeout": self.statement_timeout_s}}
