"""The coordination store: reachable, writable, its schema at a level this sparkindex can use,
and never a SQLite file behind a Spark cluster (executors on other machines cannot share it).

Nothing is left behind. A SQLite file is judged by the file system (a file that does not exist
yet is created by the first run, so its directory must be writable) and read through a
read-only connection: no write lock is taken from a run that holds the store. A server store is
written to and rolled back (a no-op UPDATE of the schema row), or, before its first run, a table
of its own is created and dropped, which proves the CREATE privilege the first run needs.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.tables import SCHEMA_VERSION, Tables, make_tables
from sparkindex.errors import ConfigError
from sparkindex.extras import fix_for
from sparkindex.preflight.model import Check, Options, existing_ancestor, fail, first_line, ok, unreachable, warn
from sparkindex.spark.session import effective_master

SERVER_FIX = "use a PostgreSQL or MySQL coordination store: coordination.url: postgresql://user@host/db"


def check_store(pipeline: Pipeline, options: Options) -> list[Check]:
    url = pipeline.coordination_url()
    checks: list[Check] = []
    master = options.session_master or effective_master(pipeline.spark)
    sqlite = url.startswith("sqlite")
    if sqlite and not master.startswith("local"):
        checks.append(
            fail(
                "store.cluster",
                f"{pipeline.origin}: coordination.url: SQLite cannot coordinate a Spark cluster (spark.master is "
                f"{master!r}; executors could not share the file)",
                SERVER_FIX,
            )
        )
    if sqlite:
        checks.extend(_beside_the_pipeline(pipeline, url))
    tables = make_tables(pipeline.coordination.prefix)
    if sqlite:
        checks.extend(_sqlite(url, tables))
    else:
        checks.extend(_server(url, tables, options))
    return checks


def _beside_the_pipeline(pipeline: Pipeline, url: str) -> list[Check]:
    """A state folder was given, so the pipeline's folder may be read-only, but the SQLite store
    the pipeline names explicitly is inside that folder: it stays there, and writes fail on a
    read-only mount."""
    path = Path(url.removeprefix("sqlite:///"))
    if not pipeline.state_dir_given or not path.is_relative_to(pipeline.base_dir.resolve()):
        return []
    return [
        warn(
            "store.state_dir",
            f"{pipeline.origin}: coordination.url: the SQLite store {path} is in the pipeline's folder, not the state "
            f"folder {pipeline.state_dir}: a state folder moves only the default store",
            "leave coordination.url out to keep the store in the state folder",
        )
    ]


def _version(version: int | None, where: str) -> Check:
    """The schema's level: older ones are migrated by the next run (and then refused by older
    sparkindex versions), newer ones are refused by this one."""
    name = "store.schema"
    if version is None:
        return ok(name, f"{where}: no sparkindex tables yet; the first run creates schema v{SCHEMA_VERSION}")
    if version > SCHEMA_VERSION:
        return fail(
            name,
            f"{where}: schema v{version} is newer than this sparkindex (v{SCHEMA_VERSION})",
            "upgrade sparkindex to the version that wrote the store",
        )
    if version < SCHEMA_VERSION:
        return warn(
            name,
            f"{where}: schema v{version}; the next run migrates it to v{SCHEMA_VERSION} (older sparkindex versions "
            "then refuse it)",
            "nothing to do unless an older sparkindex shares this store: upgrade it too",
        )
    return ok(name, f"{where}: schema v{version}, current")


# -- SQLite ----------------------------------------------------------------------------------------
def _sqlite(url: str, tables: Tables) -> list[Check]:
    path = Path(sa.make_url(url).database or "")
    if not path.is_file():
        parent = existing_ancestor(path.parent)
        if os.access(parent, os.W_OK | os.X_OK):
            return [ok("store.writable", f"{path} does not exist yet; the first run creates it")]
        return [
            fail(
                "store.writable",
                f"{path} does not exist and {parent} is not writable, so the first run cannot create it",
                f"make {parent} writable for this user, or set coordination.url elsewhere",
            )
        ]
    checks = []
    if os.access(path, os.R_OK | os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK):
        checks.append(ok("store.writable", f"{path} is writable"))
    else:
        checks.append(
            fail(
                "store.writable",
                f"{path} or its directory is not writable (SQLite writes its -wal and -shm files beside it)",
                f"make {path} and {path.parent} writable for this user",
            )
        )
    engine = sa.create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=30)
    )
    try:
        checks.append(_version(_read_version(engine, tables), str(path)))
    except sa.exc.DBAPIError as exc:
        checks.append(fail("store.schema", f"{path}: {first_line(exc)}", "is it a sparkindex store? check the file"))
    finally:
        engine.dispose()
    return checks


def _read_version(engine: sa.Engine, tables: Tables) -> int | None:
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(tables.schema.name):
            return None
        row = conn.execute(sa.select(tables.schema.c.version).where(tables.schema.c.id == 1)).first()
    return None if row is None else int(row[0])


# -- PostgreSQL, MySQL -----------------------------------------------------------------------------
def _server(url: str, tables: Tables, options: Options) -> list[Check]:
    shown = redact_url(url)
    try:
        engine = make_engine(url, pooled=False)
    except ConfigError as exc:
        return [fail("store.reachable", str(exc), fix_for(exc, SERVER_FIX))]
    except ImportError as exc:  # a driver this install lacks
        return [fail("store.reachable", f"{shown}: {exc}", "install the database driver for coordination.url")]
    try:
        try:
            version = _read_version(engine, tables)
        except sa.exc.DBAPIError as exc:
            return [
                fail(
                    "store.reachable",
                    f"{shown}: {first_line(exc)}",
                    "start the database, or correct the host, port, database, user and password in coordination.url",
                    transient=unreachable(exc),
                )
            ]
        checks = [ok("store.reachable", f"{shown} answers"), _version(version, shown)]
        if options.probe_writes:
            checks.append(_writable(engine, tables, version is not None, shown))
        return checks
    finally:
        engine.dispose()


def _writable(engine: sa.Engine, tables: Tables, exists: bool, shown: str) -> Check:
    name = "store.writable"
    probe = sa.Table(
        f"{tables.schema.name[: -len('schema')]}check_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
    )
    try:
        if exists:
            with engine.connect() as conn:
                transaction = conn.begin()
                schema = tables.schema
                conn.execute(schema.update().where(schema.c.id == 1).values(version=schema.c.version))
                transaction.rollback()
            return ok(name, f"{shown}: the store's tables are writable (an update, rolled back)")
        probe.create(engine)
        probe.drop(engine)
    except sa.exc.DBAPIError as exc:
        user = engine.url.username or "<user>"
        what = "write to the store's tables" if exists else "create the store's tables"
        return fail(
            name,
            f"{shown}: cannot {what}: {first_line(exc)}",
            f"grant {user} {'INSERT, UPDATE, DELETE' if exists else 'CREATE (and then INSERT, UPDATE, DELETE)'} "
            "on the coordination database",
        )
    return ok(name, f"{shown}: tables can be created there (a probe table was created and dropped)")
