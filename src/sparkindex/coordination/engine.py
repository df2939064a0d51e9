"""Connecting to the coordination database and creating (or upgrading) its schema.

The schema has one regime: a fresh store gets every table of :mod:`coordination.tables` at the
current version; an existing one is upgraded by the versioned migrations below, in order, each
once. No other module creates or alters a table (up to version 9 some created their own on first
use; version 10 adopted those).

SQLite gets ``BEGIN IMMEDIATE`` for every transaction: the write lock is taken up front, so a
read-then-update (a job transition) can never interleave with another process's. WAL mode lets
readers run alongside. Other dialects rely on the row lock every conditional UPDATE takes.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.idle_bound import bound_idle_transactions
from sparkindex.coordination.tables import SCHEMA_VERSION, Tables
from sparkindex.errors import ConfigError, PermanentError, TransientError
from sparkindex.extras import require_driver

#: connections each of a store's two pools keeps open once used, and how many more it opens while
#: that many are busy (closed again when returned). A Spark Python worker keeps one store for its
#: life and runs one task at a time, so it uses one or two; a driver's threads (lock keeper,
#: progress, head start) a few more. Behind PgBouncer these are client connections, cheap.
POOL_SIZE, POOL_OVERFLOW = 4, 12

#: how long a process waits for another to finish creating or upgrading the store's schema
SCHEMA_LOCK_WAIT_S = 300


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
    require_driver(url, "coordination.url", "coordination store")  # before SQLAlchemy imports it
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
    # is small (POOL_SIZE kept, POOL_OVERFLOW more under load) and grows only as far as it is used.
    # A bounded connect: an unreachable server fails fast enough for the lock keeper to retry
    # (and, after its TTL, to report the lock lost) instead of hanging in a TCP handshake.
    options: dict[str, Any] = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
    connect_args: dict[str, Any] = {"connect_timeout": 10}
    if scheme == "postgresql":
        # psycopg prepares a statement on the server after its 5th run on a connection. Behind
        # PgBouncer's transaction pooling (before 1.21) the next transaction may run on another
        # server session, where the statement does not exist (or its name already does), so the
        # store never prepares: it holds no session state at all (docs/deploy.md).
        connect_args["prepare_threshold"] = None
    if pooled:
        options.update(pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW, pool_recycle=1800)
    else:
        # a NullPool connection is closed on return, so rolling it back first is a wasted round
        # trip, and on a connection the server dropped it fails and SQLAlchemy logs the failure
        # at ERROR with a traceback (seen in the chaos campaign when the store restarted under a reindex)
        options.update(poolclass=sa.pool.NullPool, pool_reset_on_return=None)
    engine = sa.create_engine(url, connect_args=connect_args, **options)
    bound_idle_transactions(engine, scheme, url, autocommit=autocommit)
    return engine


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
    tables.write_ahead.create(conn, checkfirst=True)


def _v9_swap_log(conn: sa.Connection, tables: Tables) -> None:
    tables.swap_attempt.create(conn, checkfirst=True)


def _v10_first_use_tables(conn: sa.Connection, tables: Tables) -> None:
    """Adopt the tables that their modules created on first use up to version 9 (change capture's
    offsets, ledger, deferred changes, deferred runs, holds, presence and hand-overs; sync events and
    gaps; verify runs; dead-letter resolutions). A store may hold none, some, or all of them, in
    the shape of whichever version made them: what is missing is created, columns added later are
    added (``sync_offset.retained_bytes``, ``sync_hold.expires_at``), and the deferred-run table of
    its first release (the day and time of the last refresh) gets ``started_at`` from ``ran_at``."""
    for table in (
        tables.sync_offset,
        tables.doc_version,
        tables.change_snapshot,
        tables.deferred_run,
        tables.sync_hold,
        tables.sync_presence,
        tables.reindex_handover,
        tables.sync_event,
        tables.sync_gap,
        tables.verify_run,
        tables.dead_letter_resolved,
    ):
        if table is tables.deferred_run:
            _deferred_run_from_ran_at(conn, table)
        _adopt(conn, table)


def _v11_transform_cache(conn: sa.Connection, tables: Tables) -> None:
    """The transform cache of per-document transforms with ``on_change`` (coordination/transform_cache.py)."""
    tables.transform_cache.create(conn, checkfirst=True)


def _adopt(conn: sa.Connection, table: sa.Table) -> None:
    """Create *table*, or add the nullable columns and the indexes it lacks (each checked first:
    the step may run again after an upgrade cut short on MySQL/MariaDB, whose DDL commits at once)."""
    if not sa.inspect(conn).has_table(table.name):
        table.create(conn)
        return
    present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
    for column in table.columns:
        if column.name in present:
            continue
        if not column.nullable:
            raise PermanentError(f"coordination table {table.name} lacks column {column.name}; cannot add it")
        _add_column(conn, table, column)
    for index in table.indexes:
        _add_index(conn, table, index)


def _deferred_run_from_ran_at(conn: sa.Connection, table: sa.Table) -> None:
    """The deferred-run table as first released kept the day (``ran_on``) and time (``ran_at``) of
    the last refresh, both NOT NULL; it now keeps when the refresh started. ``ran_at`` (when it was
    recorded, after it ran) becomes ``started_at``: a refresh is then due no sooner than before."""
    if not sa.inspect(conn).has_table(table.name):
        return
    present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
    if "ran_at" not in present and "ran_on" not in present:
        return
    started = table.c.started_at
    if started.name not in present:
        _add_column(conn, table, started)
    quoted = conn.dialect.identifier_preparer.quote
    name = quoted(table.name)
    if "ran_at" in present:
        conn.execute(sa.text(f"UPDATE {name} SET {quoted(started.name)} = ran_at WHERE {quoted(started.name)} IS NULL"))
    for old in ("ran_on", "ran_at"):
        if old in present:
            conn.execute(sa.text(f"ALTER TABLE {name} DROP COLUMN {old}"))


def _add_index(conn: sa.Connection, table: sa.Table, index: sa.Index) -> None:
    if index.name not in {ix["name"] for ix in sa.inspect(conn).get_indexes(table.name)}:
        index.create(conn)


def _add_column(conn: sa.Connection, table: sa.Table, column: sa.Column[Any]) -> None:
    quoted = conn.dialect.identifier_preparer.quote
    kind = column.type.compile(dialect=conn.dialect)
    conn.execute(sa.text(f"ALTER TABLE {quoted(table.name)} ADD COLUMN {quoted(column.name)} {kind}"))


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
    10: _v10_first_use_tables,
    11: _v11_transform_cache,
}


def ensure_schema(engine: Engine, tables: Tables) -> None:
    """Create a fresh store's tables, or apply the pending migrations in order; refuse a newer
    schema than ours. A store at the current version costs two catalog reads and nothing else."""
    if engine.url.get_backend_name() == "sqlite" and engine.url.database:
        from pathlib import Path

        Path(engine.url.database).parent.mkdir(parents=True, exist_ok=True)
    if _stored_version(engine, tables) == SCHEMA_VERSION:
        return
    with _schema_lock(engine, tables) as conn:
        _create_or_migrate(conn, tables)


def _create_or_migrate(conn: sa.Connection, tables: Tables) -> None:
    if not sa.inspect(conn).has_table(tables.schema.name):
        tables.metadata.create_all(conn, checkfirst=True)
    row = conn.execute(sa.select(tables.schema.c.version).where(tables.schema.c.id == 1)).first()
    if row is None:
        # a store just created (or whose creation was cut short), maybe beside tables that
        # an older version created on first use: those are brought to the current shape
        tables.metadata.create_all(conn, checkfirst=True)
        _v10_first_use_tables(conn, tables)
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
                tables.schema.update().where(tables.schema.c.id == 1).values(version=version, upgraded_at=time.time())
            )


@contextlib.contextmanager
def _schema_lock(engine: Engine, tables: Tables) -> Iterator[sa.Connection]:
    """A connection inside a transaction, held while a store is created or migrated, so that
    processes starting together on a new or older store take turns: the first does the work, the
    others find it done.

    - PostgreSQL: a transaction-level advisory lock (``pg_advisory_xact_lock``) and the whole
      creation or migration in that one transaction (its DDL is transactional). A session-level
      lock would be held by whichever server session PgBouncer's transaction pooling lent the
      statement, and released by nobody.
    - MySQL/MariaDB commit at every DDL statement, so the lock must outlive transactions: the
      session's ``GET_LOCK``, taken and released on this one connection (such a store is not
      put behind a transaction pooler).
    - SQLite: the transaction's write lock (``BEGIN IMMEDIATE``) is held throughout."""
    dialect = engine.dialect.name
    name = str(tables.schema.name)
    if dialect not in ("mysql", "mariadb"):
        with engine.begin() as conn:
            if dialect == "postgresql":
                key = zlib.crc32(f"sparkindex:{name}".encode())
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{SCHEMA_LOCK_WAIT_S}s'")
                try:
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
                except sa.exc.OperationalError as exc:
                    if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
                        raise
                    raise TransientError(
                        f"coordination store: another process has been creating or upgrading {name} for over "
                        f"{SCHEMA_LOCK_WAIT_S} s"
                    ) from None
            yield conn
        return
    with engine.connect() as conn:
        lock = f"sparkindex:{name}"[:64]
        got = conn.execute(sa.text("SELECT GET_LOCK(:n, :t)"), {"n": lock, "t": SCHEMA_LOCK_WAIT_S}).scalar()
        if got != 1:
            raise TransientError(
                f"coordination store: another process has been creating or upgrading {name} for over "
                f"{SCHEMA_LOCK_WAIT_S} s"
            )
        conn.commit()
        try:
            with conn.begin():
                yield conn
        finally:
            conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": lock})
            conn.commit()


def _stored_version(engine: Engine, tables: Tables) -> int | None:
    """The store's schema version; None for a store without one (fresh, or cut short)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(tables.schema.name):
            return None
        row = conn.execute(sa.select(tables.schema.c.version).where(tables.schema.c.id == 1)).first()
    return None if row is None else int(row.version)
