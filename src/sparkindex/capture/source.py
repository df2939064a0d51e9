"""The choice of change source for a pipeline: log-based where the dialect has one, else polling.

Sources are named here by SQLAlchemy dialect as (module, class) and imported only when chosen, so
a PostgreSQL pipeline never loads the binlog client; no shared code branches on the dialect.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError
from sparkindex.sources.base import Source
from sparkindex.sources.change_source import ChangeSource, WatchedTable

#: Log-based sources by SQLAlchemy dialect name: (module, class).
LOG_SOURCES: dict[str, tuple[str, str]] = {
    "postgresql": ("sparkindex.sources.postgres.changes", "PostgresChangeSource"),
    "mysql": ("sparkindex.sources.mysql.changes", "MysqlChangeSource"),
}
POLLING_SOURCE = ("sparkindex.capture.polling", "PollingChangeSource")


def source_kind(pipeline: Pipeline, source: Source) -> tuple[str, str]:
    """The (module, class) of the change source for *pipeline*."""
    wanted = pipeline.sync.source
    if wanted == "auto":
        if any(idx.changes is not None for idx in pipeline.indexes):
            return POLLING_SOURCE
        return LOG_SOURCES.get(source.dialect_name, POLLING_SOURCE)
    if wanted == "polling":
        return POLLING_SOURCE
    entry = LOG_SOURCES.get(source.dialect_name)
    if entry is None:
        raise ConfigError(
            f"{pipeline.origin}: sync.source: log-based change capture is not available for {source.dialect_name} "
            f"(available: {', '.join(LOG_SOURCES)}); use source: polling with indexes[].changes"
        )
    return entry


def open_change_source(
    pipeline: Pipeline, source: Source, tables: Sequence[WatchedTable], consumer: str
) -> ChangeSource:
    module, name = source_kind(pipeline, source)
    cls: type[ChangeSource] = getattr(importlib.import_module(module), name)
    return cls(pipeline, source, tables, consumer)
