"""Connecting to the coordination database and creating (or upgrading) its schema.

SQLite gets ``BEGIN IMMEDIATE`` for every transaction: the write lock is taken up front, so a
read-then-update (a job transition) can never interleave with another process's. WAL mode lets
readers run alongside. Other dialects rely on the row lock every conditional UPDATE takes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.tables import SCHEMA_VERSION, Tables
from sparkindex.errors import ConfigError, PermanentError


def make_engine(url: str, *, autocommit: bool = False, pooled: bool = True) -> Engine:
    """The store's engine. *autocommit*: for one-statement writes on a server, each statement its
    own transaction, without the BEGIN and COMMIT round trips (ignored for SQLite, whose writes
    need BEGIN IMMEDIATE). *pooled* False: every checkout is a new connection and every close
    really closes it (for connections their user keeps: :mod:`coordination.direct`)."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 60}, poolclass=sa.pool.NullPool)

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # let the "begin" hook below issue BEGIN
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    url = normalize_url(url)
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme not in ("postgresql", "mysql"):
        raise ConfigError(
            f"coordination.url: unsupported store {scheme!r} in {redact_url(url)!r} "
            "(supported: sqlite, postgresql, mysql)"
        )
    # No pre-ping: it would add a round trip to every one-statement claim. A server restart shows
    # as a disconnect on the first statement of a dead pooled connection; SQLAlchemy then
    # invalidates the whole pool and store.base.rerun_on_conflict reruns the statement. The pool
    # keeps up to 16 connections (one per claimer thread of a worker process) instead of opening
    # and closing overflow connections under load; it grows only as far as it is used.
    # A bounded connect: an unreachable server fails fast enough for the lock keeper to retry
    # (and, after its TTL, to report the lock lost) instead of hanging in a TCP handshake.
    options: dict[str, Any] = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
    if pooled:
        options.update(pool_size=16, max_overflow=16, pool_recycle=1800)
    else:
        # a NullPool connection is closed on return, so rolling it back first is a wasted round
        # trip, and on a connection the server dropped it fails and SQLAlchemy logs the failure
        # at ERROR with a traceback (chaos seed 1 trial 8: a store restart under a reindex)
        options.update(poolclass=sa.pool.NullPool, pool_reset_on_return=None)
    return sa.create_engine(url, connect_args={"connect_timeout": 10}, **options)


def _v2_partition_writer(conn: sa.Connection, tables: Tables) -> None:
    conn.execute(sa.text(f"ALTER TABLE {tables.partition.name} ADD COLUMN writer VARCHAR(255)"))


def _v3_claim_order_index(conn: sa.Connection, tables: Tables) -> None:
    prefix = tables.partition.name[: -len("si_partition")]
    existing = {ix["name"] for ix in sa.inspect(conn).get_indexes(tables.partition.name)}
    if f"{prefix}si_partition_claim" in existing:
        sa.Index(f"{prefix}si_partition_claim", tables.partition.c.job_id).drop(conn)
    for index in tables.partition.indexes:
        if index.name == f"{prefix}si_partition_next" and index.name not in existing:
            index.create(conn)


def _v4_fingerprint_and_attempt_key(conn: sa.Connection, tables: Tables) -> None:
    conn.execute(sa.text(f"ALTER TABLE {tables.job.name} ADD COLUMN fingerprint VARCHAR(128)"))
    conn.execute(sa.text(f"ALTER TABLE {tables.dead_letter.name} ADD COLUMN attempt_key VARCHAR(512)"))


def _v5_bulk_latency(conn: sa.Connection, tables: Tables) -> None:
    conn.execute(sa.text(f"ALTER TABLE {tables.partition.name} ADD COLUMN bulk_latency TEXT"))


def _v6_partition_stages(conn: sa.Connection, tables: Tables) -> None:
    conn.execute(sa.text(f"ALTER TABLE {tables.partition.name} ADD COLUMN stages TEXT"))


def _v7_seed_error_counts(conn: sa.Connection, tables: Tables) -> None:
    conn.execute(sa.text(f"ALTER TABLE {tables.partition.name} ADD COLUMN update_errors INTEGER NOT NULL DEFAULT 0"))
    conn.execute(sa.text(f"ALTER TABLE {tables.job.name} ADD COLUMN partition_not_found INTEGER NOT NULL DEFAULT 0"))


def _v8_write_ahead(conn: sa.Connection, tables: Tables) -> None:
    tables.write_ahead.create(conn, checkfirst=True)  # create_all made it already; named here for v8


def _v9_swap_log(conn: sa.Connection, tables: Tables) -> None:
    tables.swap_attempt.create(conn, checkfirst=True)  # create_all made it already; named here for v9


#: Upgrades from version N-1 to N. The tool creates and versions its own schema, so upgrading
#: sparkindex never loses the state of unfinished jobs.
MIGRATIONS: dict[int, Callable[[sa.Connection, Tables], None]] = {
    2: _v2_partition_writer,
    3: _v3_claim_order_index,
    4: _v4_fingerprint_and_attempt_key,
    5: _v5_bulk_latency,
    6: _v6_partition_stages,
    7: _v7_seed_error_counts,
    8: _v8_write_ahead,
    9: _v9_swap_log,
}


def ensure_schema(engine: Engine, tables: Tables) -> None:
    """Create missing tables, apply pending migrations in order; refuse a newer schema than ours."""
    if engine.url.get_backend_name() == "sqlite" and engine.url.database:
        from pathlib import Path

        Path(engine.url.database).parent.mkdir(parents=True, exist_ok=True)
    tables.metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        row = conn.execute(sa.select(tables.schema.c.version).where(tables.schema.c.id == 1)).first()
        if row is None:
            conn.execute(tables.schema.insert().values(id=1, version=SCHEMA_VERSION, upgraded_at=time.time()))
        elif row.version > SCHEMA_VERSION:
            raise PermanentError(
                f"coordination schema version {row.version} is newer than this sparkindex ({SCHEMA_VERSION}); "
                "upgrade sparkindex"
            )
        else:
            for version in range(row.version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[version](conn, tables)
                conn.execute(
                    tables.schema.update()
                    .where(tables.schema.c.id == 1)
                    .values(version=version, upgraded_at=time.time())
                )
