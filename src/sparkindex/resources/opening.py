"""The openers: a pipeline's store, source and target, each a context manager that closes it.

The URL-level openers are for callers without a pipeline (the DataFrame writer and reader, which
get a URL as a Spark option; preflight and ``init``, which open a URL with their own timeouts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import ConfigError
from sparkindex.index_source.source import IndexSource
from sparkindex.sources.base import DEFAULT_STATEMENT_TIMEOUT_S, Source
from sparkindex.sources.registry import DATABASE_SCHEMES, open_database, replica_link, url_scheme
from sparkindex.sources.replica import wait_for_replica
from sparkindex.targets import registry as targets
from sparkindex.targets.target import Target

__all__ = [
    "open_source",
    "open_source_url",
    "open_store",
    "open_store_url",
    "open_target",
    "open_target_url",
    "wait_for_read_source",
]


def open_store(pipeline: Pipeline) -> CoordinationStore:
    """The pipeline's coordination store, its schema created or upgraded."""
    return CoordinationStore(pipeline.coordination_url(), pipeline.coordination.prefix)


def open_store_url(url: str, prefix: str = "") -> CoordinationStore:
    """The coordination store at *url* (tables named with *prefix*), its schema created or upgraded."""
    return CoordinationStore(url, prefix)


def open_source(pipeline: Pipeline, *, bulk_reads: bool = False) -> Source:
    """The pipeline's source: its database, or the indexes it rebuilds; queries time out after
    ``job.source_timeout_s``.

    With *bulk_reads* (a full reindex's planning and partitions, verify, repair) it is the read
    replica, ``source.read_url``, when the pipeline names one: the only place that chooses. Such a
    reader must not read before :func:`wait_for_read_source` returned (a driver calls it once;
    its tasks run after). Everything else (schema checks, change capture and the rows it re-reads
    by key, P0) reads the primary, ``source.url``, which is never behind its own log."""
    url = pipeline.read_source_url() if bulk_reads else pipeline.source_url()
    return open_source_url(url, pipeline.job.source_timeout_s, base_dir=pipeline.base_dir)


def wait_for_read_source(pipeline: Pipeline, reads: Source, why: str) -> None:
    """Return once *reads* (opened with ``bulk_reads``) has everything the primary has committed
    now: at once without ``source.read_url``; else after the replica replayed the primary's
    current position, or :class:`~sparkindex.sources.replica.ReplicaBehind` (exit 2) after
    ``source.max_replica_lag_s``. *why* names the job in the log line an operator sees."""
    if pipeline.source.read_url is None:
        return
    with open_source(pipeline) as primary:
        wait_for_replica(replica_link(primary, reads), pipeline.source.max_replica_lag_s, why)


def open_source_url(
    url: str,
    statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S,
    *,
    base_dir: Path | None = None,
    options: dict[str, Any] | None = None,
) -> Source:
    """The source at *url*: a database (its queries cancelled after *statement_timeout_s*), or,
    for a URL of a target scheme, that backend's indexes (``indexes[].table`` names the index or
    alias to rebuild; *base_dir* and *options* as for :func:`open_target_url`)."""
    scheme = url_scheme(url)
    if scheme in DATABASE_SCHEMES:
        return open_database(url, statement_timeout_s)
    if scheme in targets.SCHEMES:
        targets.require_client(url, "source.url", "index to rebuild")
        return IndexSource.open(url, base_dir, options)
    raise ConfigError(
        f"source.url: unsupported source {scheme!r} in {redact_url(url)!r} (supported: "
        f"{', '.join(DATABASE_SCHEMES)}, or an index to rebuild: {', '.join(targets.SCHEMES)})"
    )


def open_target(pipeline: Pipeline) -> Target:
    """The pipeline's target, with its ``target.options``; a relative ``tantivy://`` root is
    taken from the pipeline file's folder."""
    return open_target_url(pipeline.target.url, pipeline.base_dir, pipeline.target.options)


def open_target_url(url: str, base_dir: Path, options: dict[str, Any] | None = None) -> Target:
    """The target at *url* with the backend's own *options*; a relative ``tantivy://`` root is
    taken from *base_dir*."""
    return targets.open_target(url, base_dir, options)
