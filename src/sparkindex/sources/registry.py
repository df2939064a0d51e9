"""Choosing the source dialect from the URL scheme."""

from __future__ import annotations

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.sources.base import Source


def open_source(url: str) -> Source:
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme == "sqlite":
        from sparkindex.sources.sqlite import SqliteSource

        return SqliteSource(url)
    raise ConfigError(f"source.url: unsupported database {scheme!r} in {redact_url(url)!r} (supported: sqlite)")
