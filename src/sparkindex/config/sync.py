"""Change capture: the ``sync`` section and an index's polling settings (``indexes[].changes``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkindex.config.base import Strict


class ChangesConfig(Strict):
    """Polling change capture (:mod:`sparkindex.capture.polling`): rows whose monotone ``column``
    moved past the last position, re-read with an ``overlap_s`` window for transactions that
    committed late; deletes from a ``tombstones`` table (its ``table`` names the deleted row's
    table, its ``key`` the deleted key as JSON) or, without one, a key diff every ``key_diff_every_s``."""

    column: str = Field(
        description="the monotone column polled (updated_at, a row version) in every table of the index's tree"
    )
    tables: dict[str, str] = Field(default_factory=dict, description="per-table column overrides")
    overlap_s: float = Field(default=5.0, ge=0, description="how far back each poll re-reads, for late commits")
    tombstones: str | None = Field(
        default=None,
        description="a table of deleted rows (columns table and key); without one, deletes come from key diffs",
    )
    key_diff_every_s: float = Field(  # each diff is a batch of its own
        default=300.0, ge=1.0, description="seconds between key diffs of index and source, which find deletes"
    )
    key_diff_range_docs: int = Field(
        default=50_000, ge=1, description="documents per sort-key range of the key diff: each range is one Spark task"
    )


class SyncConfig(Strict):
    """``sync``: continuous change capture (:mod:`sparkindex.capture`)."""

    source: Literal["auto", "log", "polling"] = Field(
        default="auto",
        description=(
            "where changes come from: the database's log (PostgreSQL logical decoding, the MariaDB/MySQL"
            " binlog) or polling indexes[].changes; auto polls when an index has changes:, else reads the log"
        ),
    )
    group: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_\-]+$",
        description="consumer group: its own offsets per alias, one sync at a time",
    )
    slot: str = Field(default="sparkindex", pattern=r"^[a-z0-9_]{1,40}$", description="PostgreSQL slot prefix")
    lag_warn_bytes: int = Field(default=1 << 30, gt=0, description="warn when a slot retains more WAL")
    trigger_s: float = Field(default=0.5, gt=0, description="how often the stream looks for changes")
    max_batch_changes: int = Field(default=50_000, gt=0, description="changes read into one streaming batch at most")
    catch_up_lag_s: float = Field(default=2.0, gt=0, description="a reindex swaps once this close to the head")
    deferred_at: str | None = Field(
        default=None,
        pattern=r"^([01]\d|2[0-3]):[0-5]\d$",
        description="HH:MM: once a day at this time a running sync applies the deferred relations' changes",
    )
    offsets: Literal["store", "target"] = Field(
        default="store",
        description=(
            "where consumer offsets live: the coordination store, or an index of the target (checkpoint"
            " and processed-event documents, OpenSearch/Elasticsearch)"
        ),
    )
    truncate_range_docs: int = Field(
        default=50_000, gt=0, description="documents per Spark task when a TRUNCATE rebuilds every document of an index"
    )
    offsets_index: str = Field(
        default="sparkindex-offsets",
        pattern=r"^[a-z0-9][a-z0-9_\-]*$",
        max_length=200,
        description="the index holding offsets under offsets: target",
    )
    offsets_retention_days: float = Field(default=7.0, gt=0, description="processed-event documents kept")
    offsets_cache: int = Field(default=10_000, gt=0, description="checkpoints a sync remembers writing")
    offsets_namespace: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_\-]{1,64}$",
        description=(
            "whose offsets and slots these are, in an offsets index or a server several pipelines share"
            " (default: derived from the coordination store and prefix)"
        ),
    )
    server_id: int = Field(default=7301, gt=0, description="MySQL/MariaDB replica server id")
    on_gap: Literal["reconcile", "fail"] = Field(
        default="reconcile",
        description=(
            "what a sync does when the log cannot serve its stored position (a slot dropped, binlogs"
            " purged, an alias without an offset): verify and repair the aliases on Spark, then stream"
            " from the new position; or refuse with exit 3, naming the gap"
        ),
    )
