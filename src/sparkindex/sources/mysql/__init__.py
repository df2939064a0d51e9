"""MySQL / MariaDB source dialect (mysqlclient; change capture reads the binlog with mysql-replication)."""

from sparkindex.sources.mysql.source import MysqlSource

__all__ = ["MysqlSource"]
