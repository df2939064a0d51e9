"""The coordination schema, in portable SQLAlchemy Core (SQLite, PostgreSQL, MySQL/MariaDB).

Times are epoch seconds as doubles; JSON is stored as text so every dialect reads it the same.
A table prefix lets several clusters share one database (Data Prepper's ``partition_prefix``).
Every table is here and only here: :mod:`sparkindex.coordination.engine` creates them on a fresh
store and changes them by versioned migrations, and no other module creates or alters any.
Keys of several strings stay within MariaDB's 3,072-byte limit in utf8mb4 (4 bytes a character).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

SCHEMA_VERSION = 11

Time = sa.Float(precision=53)


@dataclass(frozen=True)
class Tables:
    metadata: sa.MetaData
    schema: sa.Table
    job: sa.Table
    partition: sa.Table
    lock: sa.Table
    dead_letter: sa.Table
    write_ahead: sa.Table
    swap_attempt: sa.Table
    # v10: the tables other modules used to create on first use (see make_first_use_tables)
    sync_offset: sa.Table
    doc_version: sa.Table
    change_snapshot: sa.Table
    deferred_run: sa.Table
    sync_hold: sa.Table
    sync_presence: sa.Table
    reindex_handover: sa.Table
    sync_event: sa.Table
    sync_gap: sa.Table
    verify_run: sa.Table
    dead_letter_resolved: sa.Table
    # what expensive per-document transforms last produced (coordination/transform_cache.py)
    transform_cache: sa.Table

    @property
    def prefix(self) -> str:
        """The table prefix these tables were made with."""
        return str(self.schema.name)[: -len("si_schema")]


@functools.cache
def make_tables(prefix: str = "") -> Tables:
    """The tables of *prefix*, made once per process: every store and view of one prefix shares
    them, so SQLAlchemy's compiled-statement cache (keyed by the tables) serves them all, and a
    store opened again (a scheduler's next run) compiles nothing again. Nothing alters them."""
    md = sa.MetaData()
    p = f"{prefix}si_"
    schema = sa.Table(
        f"{p}schema",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("upgraded_at", Time, nullable=False),
    )
    job = sa.Table(
        f"{p}job",
        md,
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("alias_key", sa.String(512), nullable=False, index=True),
        sa.Column("status", sa.String(32), nullable=False, index=True),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.Column("targets_json", sa.Text, nullable=False, default="{}"),
        sa.Column("run_id", sa.String(64)),
        sa.Column("total_records", sa.BigInteger, nullable=False, default=0),
        sa.Column("processed_records", sa.BigInteger, nullable=False, default=0),
        sa.Column("success_records", sa.BigInteger, nullable=False, default=0),
        sa.Column("failed_records", sa.BigInteger, nullable=False, default=0),
        sa.Column("stats_json", sa.Text),
        sa.Column("created_by", sa.String(255)),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("started_at", Time),
        sa.Column("completed_at", Time),
        sa.Column("updated_at", Time, nullable=False),
        sa.Column("error_message", sa.Text),
        sa.Column("fingerprint", sa.String(128)),  # v4: the plan a rerun may resume only unchanged
        # v7: workers given a partition of this job that the store no longer held (partitionNotFoundErrors)
        sa.Column("partition_not_found", sa.Integer, nullable=False, default=0, server_default="0"),
    )
    partition = sa.Table(
        f"{p}partition",
        md,
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("job_id", sa.String(36), sa.ForeignKey(job.c.id), nullable=False),
        sa.Column("entity", sa.String(255), nullable=False),
        sa.Column("partition_index", sa.Integer, nullable=False),
        sa.Column("range_start", sa.Text),
        sa.Column("range_end", sa.Text),
        sa.Column("estimated_count", sa.BigInteger, nullable=False, default=0),
        sa.Column("work_units", sa.BigInteger, nullable=False, default=0),
        sa.Column("priority", sa.Integer, nullable=False, default=0),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("cursor", sa.Text),
        sa.Column("processed_count", sa.BigInteger, nullable=False, default=0),
        sa.Column("success_count", sa.BigInteger, nullable=False, default=0),
        sa.Column("failed_count", sa.BigInteger, nullable=False, default=0),
        sa.Column("owner", sa.String(255)),
        sa.Column("writer", sa.String(255)),  # the process whose acknowledged writes moved the cursor
        sa.Column("run_id", sa.String(64)),
        sa.Column("claim_token", sa.BigInteger, nullable=False, default=0),
        sa.Column("claims", sa.Integer, nullable=False, default=0),
        sa.Column("claimed_at", Time),
        sa.Column("started_at", Time),
        sa.Column("completed_at", Time),
        sa.Column("last_heartbeat", Time),
        sa.Column("reopen_at", Time),
        sa.Column("closed_count", sa.Integer, nullable=False, default=0),
        sa.Column("last_error", sa.Text),
        sa.Column("retry_count", sa.Integer, nullable=False, default=0),
        sa.Column("bulk_latency", sa.Text),  # v5: the partition's bulk latency histogram (JSON)
        # v6: the sealed stages its acknowledged batches went into (targets that stage new
        # versions), comma-separated: exactly what the finish step adopts
        sa.Column("stages", sa.Text),
        # v7: fenced updates refused because another claim owns the partition (partitionUpdateErrors)
        sa.Column("update_errors", sa.Integer, nullable=False, default=0, server_default="0"),
        sa.UniqueConstraint("job_id", "entity", "partition_index", name=f"{p}partition_unique"),
    )
    # Matches the claim order exactly, so "the next PENDING partition" is one index probe, not a sort.
    sa.Index(
        f"{p}partition_next",
        partition.c.job_id,
        partition.c.status,
        partition.c.priority.desc(),
        partition.c.work_units.desc(),
        partition.c.entity,
        partition.c.partition_index,
    )
    lock = sa.Table(
        f"{p}lock",
        md,
        sa.Column("lock_key", sa.String(255), primary_key=True),
        sa.Column("job_id", sa.String(36)),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("acquired_at", Time, nullable=False),
        sa.Column("last_heartbeat", Time, nullable=False),
        sa.Column("expires_at", Time, nullable=False),
    )
    dead_letter = sa.Table(
        f"{p}dead_letter",
        md,
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("partition_id", sa.String(36)),
        sa.Column("error_class", sa.String(255), nullable=False),
        sa.Column("error_message", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("attempt_key", sa.String(512)),  # v4: the write attempt that last counted
        sa.Column("first_seen", Time, nullable=False),
        sa.Column("last_seen", Time, nullable=False),
    )
    # v8: what a partition attempt writing in place is about to write, recorded before each bulk
    # and forgotten once acknowledged (coordination/write_ahead.py)
    write_ahead = sa.Table(
        f"{p}write_ahead",
        md,
        sa.Column("partition_id", sa.String(36), primary_key=True),
        sa.Column("claim_token", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.String(36), nullable=False, index=True),
        sa.Column("after_cursor", sa.Text),  # the cursor the batch starts after (JSON)
        # the batch's ids (with routing and version where set), JSON; a batch's ids can exceed
        # MySQL's 64 KB TEXT
        sa.Column("docs", sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb"), nullable=False),
        sa.Column("written_at", Time, nullable=False),
    )
    # v9: the fence log, every attempt to move an alias with a fencing token and how it ended
    # (coordination/swap_log.py)
    swap_attempt = sa.Table(
        f"{p}swap_attempt",
        md,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("attempt_key", sa.String(32), nullable=False, unique=True),
        sa.Column("alias", sa.String(255), nullable=False, index=True),
        sa.Column("index_name", sa.String(255), nullable=False),
        sa.Column("expected_previous", sa.String(255)),
        sa.Column("fence", sa.BigInteger),
        sa.Column("job_id", sa.String(36)),
        # the lock table's token and holder for the alias when the attempt was recorded
        sa.Column("lock_token", sa.BigInteger),
        sa.Column("lock_holder", sa.String(255)),
        sa.Column("attempted_at", Time, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),  # pending, moved, refused, error
        sa.Column("detail", sa.Text),
        sa.Column("finished_at", Time),
    )
    core = (md, schema, job, partition, lock, dead_letter, write_ahead, swap_attempt)
    return Tables(*core, *make_first_use_tables(md, p), *make_later_tables(md, p))


def make_later_tables(md: sa.MetaData, p: str) -> tuple[sa.Table, ...]:
    """The tables added after version 10, in :class:`Tables` field order."""
    return (make_transform_cache(md, p),)


def make_transform_cache(md: sa.MetaData, p: str) -> sa.Table:
    """Per alias and document: the hash of a transform's inputs (its ``on_change`` fields and its
    identity) and what it did to the document then (a JSON diff), so a run whose inputs did not
    change applies the diff instead of calling the transform again (embeddings cost seconds)."""
    return sa.Table(
        f"{p}transform_cache",
        md,
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("input_hash", sa.String(64), nullable=False),
        # an embedding's floats alone outgrow MySQL's 64 KB TEXT
        sa.Column("diff", sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb"), nullable=False),
        sa.Column("updated_at", Time, nullable=False),
    )


#: the drift counts a verify run keeps as columns (the rest of its report is JSON)
VERIFY_COUNTS = ("checked", "missing", "extra", "stale", "duplicates", "unbuildable", "index_docs")


def make_first_use_tables(md: sa.MetaData, p: str) -> tuple[sa.Table, ...]:
    """The tables that, up to schema version 9, the modules using them created on first use
    (outside the versioned schema); version 10 adopted them. In :class:`Tables` field order."""
    # change capture (coordination/offsets.py, ledger.py, snapshots.py, deferred_runs.py)
    sync_offset = sa.Table(
        f"{p}sync_offset",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("offset_json", sa.Text, nullable=False),
        sa.Column("index_name", sa.String(255)),
        sa.Column("applied", sa.BigInteger, nullable=False, default=0),
        sa.Column("deleted", sa.BigInteger, nullable=False, default=0),
        sa.Column("lag_s", sa.Float, nullable=False, default=0.0),
        sa.Column("updated_at", Time, nullable=False),
        #: log the source retains for the group (a PostgreSQL slot's WAL), as last measured
        sa.Column("retained_bytes", sa.BigInteger),
    )
    doc_version = sa.Table(
        f"{p}doc_version",
        md,
        sa.Column("index_name", sa.String(255), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", Time, nullable=False),
    )
    change_snapshot = sa.Table(
        f"{p}change_snapshot",
        md,
        sa.Column("alias", sa.String(128), primary_key=True),
        sa.Column("tbl", sa.String(128), primary_key=True),
        sa.Column("row_key", sa.String(512), primary_key=True),
        sa.Column("images", sa.Text, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("recorded_at", Time, nullable=False),
    )
    deferred_run = sa.Table(
        f"{p}deferred_run",
        md,
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("started_at", Time, nullable=False),
    )
    # a reindex and the live syncs taking turns (coordination/holds.py)
    sync_hold = sa.Table(
        f"{p}sync_hold",
        md,
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("since", Time, nullable=False),
        #: set by a live sync when it has paused the alias: the position it had applied
        sa.Column("paused_at", sa.BigInteger),
        sa.Column("paused_by", sa.String(255)),
        #: the lease; NULL in rows placed before holds had one (holds.LEGACY_HOLD_TTL_S)
        sa.Column("expires_at", Time),
    )
    sync_presence = sa.Table(
        f"{p}sync_presence",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("since", Time, nullable=False),
        sa.Column("expires_at", Time, nullable=False),
        #: the hold this sync paused the alias for, and the position it had applied then
        sa.Column("paused_for", sa.String(255)),
        sa.Column("paused_at", sa.BigInteger),
    )
    reindex_handover = sa.Table(
        f"{p}reindex_handover",
        md,
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("index_name", sa.String(255), nullable=False),
        #: the log position before the partitions were planned (no catch-up: the head, no slot)
        sa.Column("start_position", sa.BigInteger),
        sa.Column("start_json", sa.Text),
        #: the swap, once done: the fencing token it carried and when
        sa.Column("fence", sa.BigInteger),
        sa.Column("swapped_at", Time),
    )
    # what went wrong in a sync, and each gap (coordination/sync_events.py)
    sync_event = sa.Table(
        f"{p}sync_event",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("times", sa.BigInteger, nullable=False),
        sa.Column("last_at", Time, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    sync_gap = sa.Table(
        f"{p}sync_gap",
        md,
        sa.Column("gap_id", sa.String(36), primary_key=True),
        sa.Column("group_name", sa.String(255), nullable=False),
        sa.Column("alias", sa.String(255), nullable=False),
        sa.Column("found_at", Time, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("stored", sa.BigInteger),
        sa.Column("available", sa.BigInteger),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("ended_at", Time),
        sa.Column("position", sa.BigInteger),
        sa.Column("found_json", sa.Text),
        sa.Column("detail", sa.Text),
    )
    sa.Index(f"{p}sync_gap_found", sync_gap.c.group_name, sync_gap.c.found_at)
    # results of verify runs (coordination/verify_runs.py)
    verify_run = sa.Table(
        f"{p}verify_run",
        md,
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("index_name", sa.String(255)),
        sa.Column("trigger", sa.String(32), nullable=False),  # cli, scheduled, api
        sa.Column("repair", sa.Boolean, nullable=False, default=False),
        sa.Column("status", sa.String(16), nullable=False),  # clean, drift, failed
        *(sa.Column(c, sa.BigInteger, nullable=False, default=0) for c in VERIFY_COUNTS),
        sa.Column("started_at", Time, nullable=False),
        sa.Column("finished_at", Time, nullable=False),
        sa.Column("report_json", sa.Text),
        sa.Column("error", sa.Text),
    )
    sa.Index(f"{p}verify_run_latest", verify_run.c.alias, verify_run.c.finished_at)
    # dead letters a re-drive resolved (coordination/dead_letters.py)
    dead_letter_resolved = sa.Table(
        f"{p}dead_letter_resolved",
        md,
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("error_class", sa.String(255), nullable=False),
        sa.Column("error_message", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("first_seen", Time, nullable=False),
        sa.Column("last_seen", Time, nullable=False),
        sa.Column("resolved_at", Time, nullable=False, index=True),
        sa.Column("resolution", sa.String(32), nullable=False),  # redriven, gone
    )
    return (
        sync_offset,
        doc_version,
        change_snapshot,
        deferred_run,
        sync_hold,
        sync_presence,
        reindex_handover,
        sync_event,
        sync_gap,
        verify_run,
        dead_letter_resolved,
    )
