"""PostgreSQL source dialect (psycopg 3)."""

from sparkindex.sources.postgres.source import PostgresSource

__all__ = ["PostgresSource"]
