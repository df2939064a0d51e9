"""Choosing the database dialect from the URL scheme.

Only databases: an index as a source (``tantivy://``, ``opensearch://``, ...) reads through a
target, which this package never imports; :func:`sparkindex.resources.open_source_url` chooses
between the two.
"""

from __future__ import annotations

from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.errors import ConfigError
from sparkindex.extras import require_driver
from sparkindex.sources.base import DEFAULT_STATEMENT_TIMEOUT_S, Source
from sparkindex.sources.replica import ReplicaLink

#: the URL schemes of the databases a source reads
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql")


def url_scheme(url: str) -> str:
    """The scheme of *url* without its driver (``postgresql+psycopg`` is ``postgresql``)."""
    return normalize_url(url).split(":", 1)[0].split("+", 1)[0].lower()


def open_database(url: str, statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S) -> Source:
    """The database source for *url*; every query it runs is cancelled after *statement_timeout_s*."""
    require_driver(url, "source.url", "source")  # before SQLAlchemy imports it
    url = normalize_url(url)
    scheme = url_scheme(url)
    if scheme == "sqlite":
        from sparkindex.sources.sqlite import SqliteSource

        return SqliteSource(url, statement_timeout_s=statement_timeout_s)
    if scheme == "postgresql":
        from sparkindex.sources.postgres import PostgresSource

        return PostgresSource(url, statement_timeout_s=statement_timeout_s)
    if scheme == "mysql":
        from sparkindex.sources.mysql import MysqlSource

        return MysqlSource(url, statement_timeout_s=statement_timeout_s)
    raise ConfigError(
        f"source.url: unsupported database {scheme!r} in {redact_url(url)!r} (supported: "
        f"{', '.join(DATABASE_SCHEMES)}; an index as a source is opened by sparkindex.resources.open_source)"
    )


def replica_link(primary: Source, replica: Source) -> ReplicaLink:
    """The replica link for the sources' database kind (the config made sure both are one kind)."""
    kind = replica.dialect_name
    if kind == "postgresql":
        from sparkindex.sources.postgres.replica import PostgresReplicaLink

        return PostgresReplicaLink(primary, replica)
    if kind == "mysql":
        from sparkindex.sources.mysql.replica import MariadbReplicaLink

        return MariadbReplicaLink(primary, replica)
    raise ConfigError(f"source.read_url: {kind} has no read replicas (use a postgresql:// or mysql:// URL)")


#: The name callers outside ``sparkindex.resources`` still use (databases only); new code opens
#: a pipeline's source with :func:`sparkindex.resources.open_source`.
open_source = open_database
