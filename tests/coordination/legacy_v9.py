"""The coordination store exactly as sparkindex left it at commit ed93f79 (schema version 9), frozen
here so that upgrade tests keep building that store whatever the current schema becomes.

Two parts: the versioned core (``make_v9_core``: a copy of that commit's ``make_tables``), and the
tables the same code created on first use, outside the versioned schema (``make_first_use``): by
the old ``OffsetStore`` (offsets, version ledger, change snapshots, deferred runs, holds, presence,
hand-overs), ``SyncEvents`` (events, gaps), ``VerifyRuns`` and the dead-letter resolutions. Those
could exist in an older shape than ed93f79 defined, since ``create_all`` never changed a table that
existed: ``old=True`` gives the shapes before the columns added later (``sync_offset`` without
``retained_bytes``, ``sync_hold`` without ``expires_at``, ``deferred_run`` as first released with
``ran_on``/``ran_at``, ``change_snapshot`` with 255-character keys, ``si_sync_gap`` not there yet).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

Time = sa.Float(precision=53)


@dataclass(frozen=True)
class V9Core:
    metadata: sa.MetaData
    schema: sa.Table
    job: sa.Table
    partition: sa.Table
    lock: sa.Table
    dead_letter: sa.Table
    write_ahead: sa.Table
    swap_attempt: sa.Table


def make_v9_core(prefix: str = "") -> V9Core:
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
    return V9Core(md, schema, job, partition, lock, dead_letter, write_ahead, swap_attempt)


def make_first_use(prefix: str = "", *, old: bool = False, dialect: str = "sqlite") -> sa.MetaData:
    """The first-use tables as ed93f79 created them (*old*: in their earlier shapes, see above)."""
    md = sa.MetaData()
    p = f"{prefix}si_"
    offset_columns = [
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("offset_json", sa.Text, nullable=False),
        sa.Column("index_name", sa.String(255)),
        sa.Column("applied", sa.BigInteger, nullable=False, default=0),
        sa.Column("deleted", sa.BigInteger, nullable=False, default=0),
        sa.Column("lag_s", sa.Float, nullable=False, default=0.0),
        sa.Column("updated_at", Time, nullable=False),
    ]
    if not old:
        offset_columns.append(sa.Column("retained_bytes", sa.BigInteger))
    sa.Table(f"{p}sync_offset", md, *offset_columns)
    sa.Table(
        f"{p}doc_version",
        md,
        sa.Column("index_name", sa.String(255), primary_key=True),
        sa.Column("doc_id", sa.String(512), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", Time, nullable=False),
    )
    # before 1f9ed2f the key was 255 + 255 + 512 characters, which MariaDB refused (utf8mb4)
    key = 255 if old and dialect != "mysql" else 128
    sa.Table(
        f"{p}change_snapshot",
        md,
        sa.Column("alias", sa.String(key), primary_key=True),
        sa.Column("tbl", sa.String(key), primary_key=True),
        sa.Column("row_key", sa.String(512), primary_key=True),
        sa.Column("images", sa.Text, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("recorded_at", Time, nullable=False),
    )
    if old:  # cb0996b: the day of the last refresh, replaced by started_at in ce0dcb8
        sa.Table(
            f"{p}deferred_run",
            md,
            sa.Column("alias", sa.String(255), primary_key=True),
            sa.Column("ran_on", sa.String(10), nullable=False),
            sa.Column("ran_at", Time, nullable=False),
        )
    else:
        sa.Table(
            f"{p}deferred_run",
            md,
            sa.Column("alias", sa.String(255), primary_key=True),
            sa.Column("started_at", Time, nullable=False),
        )
    hold_columns = [
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("since", Time, nullable=False),
        sa.Column("paused_at", sa.BigInteger),
        sa.Column("paused_by", sa.String(255)),
    ]
    if not old:
        hold_columns.append(sa.Column("expires_at", Time))
    sa.Table(f"{p}sync_hold", md, *hold_columns)
    sa.Table(
        f"{p}sync_presence",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("since", Time, nullable=False),
        sa.Column("expires_at", Time, nullable=False),
        sa.Column("paused_for", sa.String(255)),
        sa.Column("paused_at", sa.BigInteger),
    )
    sa.Table(
        f"{p}reindex_handover",
        md,
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("index_name", sa.String(255), nullable=False),
        sa.Column("start_position", sa.BigInteger),
        sa.Column("start_json", sa.Text),
        sa.Column("fence", sa.BigInteger),
        sa.Column("swapped_at", Time),
    )
    sa.Table(
        f"{p}sync_event",
        md,
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("times", sa.BigInteger, nullable=False),
        sa.Column("last_at", Time, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    if not old:
        gap = sa.Table(
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
        sa.Index(f"{p}sync_gap_found", gap.c.group_name, gap.c.found_at)
    counts = ("checked", "missing", "extra", "stale", "duplicates", "unbuildable", "index_docs")
    verify_run = sa.Table(
        f"{p}verify_run",
        md,
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("alias", sa.String(255), primary_key=True),
        sa.Column("index_name", sa.String(255)),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("repair", sa.Boolean, nullable=False, default=False),
        sa.Column("status", sa.String(16), nullable=False),
        *(sa.Column(c, sa.BigInteger, nullable=False, default=0) for c in counts),
        sa.Column("started_at", Time, nullable=False),
        sa.Column("finished_at", Time, nullable=False),
        sa.Column("report_json", sa.Text),
        sa.Column("error", sa.Text),
    )
    sa.Index(f"{p}verify_run_latest", verify_run.c.alias, verify_run.c.finished_at)
    sa.Table(
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
        sa.Column("resolution", sa.String(32), nullable=False),
    )
    return md
