"""MySQL / MariaDB source dialect (PyMySQL)."""

from sparkindex.sources.mysql.source import MysqlSource

__all__ = ["MysqlSource"]
