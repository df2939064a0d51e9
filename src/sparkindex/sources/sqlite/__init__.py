"""SQLite source dialect."""

from sparkindex.sources.sqlite.source import SqliteSource

__all__ = ["SqliteSource"]
