"""Connecting to the coordination database and creating (or upgrading) its schema.

SQLite gets ``BEGIN IMMEDIATE`` for every transaction: the write lock is taken up front, so a
read-then-update (a claim) can never interleave with another process's. WAL mode lets readers
run alongside. Other dialects use row locks (``FOR UPDATE SKIP LOCKED``) instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.config.model import normalize_url
from sparkindex.config.secrets import redact_url
from sparkindex.coordination.tables import SCHEMA_VERSION, Tables
from sparkindex.errors import ConfigError, PermanentError


def make_engine(url: str) -> Engine:
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
    # Row locks (FOR UPDATE SKIP LOCKED) make claims atomic; the pool survives server restarts
    # because every checkout is pinged first.
    return sa.create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=16, pool_recycle=1800)


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


#: Upgrades from version N-1 to N. The tool creates and versions its own schema, so upgrading
#: sparkindex never loses the state of unfinished jobs.
MIGRATIONS: dict[int, Callable[[sa.Connection, Tables], None]] = {2: _v2_partition_writer, 3: _v3_claim_order_index}


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
