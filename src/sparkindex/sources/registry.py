"""Choosing the source from the URL scheme: a database dialect, or a search backend's indexes.

A URL of a target scheme (``tantivy://``, ``opensearch://``, ...) makes an :class:`IndexSource`:
the pipeline rebuilds indexes of that backend (``indexes[].table`` names the index or alias).
"""

from __future__ import annotations

from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.errors import ConfigError
from sparkindex.sources.base import Source


def open_source(url: str, statement_timeout_s: float = 600.0) -> Source:
    """The source for *url*; every query it runs is cancelled after *statement_timeout_s*."""
    url = normalize_url(url)
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme == "sqlite":
        from sparkindex.sources.sqlite import SqliteSource

        return SqliteSource(url, statement_timeout_s=statement_timeout_s)
    if scheme == "postgresql":
        from sparkindex.sources.postgres import PostgresSource

        return PostgresSource(url, statement_timeout_s=statement_timeout_s)
    if scheme == "mysql":
        from sparkindex.sources.mysql import MysqlSource

        return MysqlSource(url, statement_timeout_s=statement_timeout_s)
    from sparkindex.targets.registry import SCHEMES

    if scheme in SCHEMES:
        from sparkindex.sources.index.source import IndexSource

        return IndexSource.open(url)
    raise ConfigError(
        f"source.url: unsupported source {scheme!r} in {redact_url(url)!r} (supported: sqlite, postgresql, mysql, "
        f"or an index to rebuild: {', '.join(SCHEMES)})"
    )
