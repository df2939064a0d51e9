"""PostgreSQL change capture: what :mod:`sparkindex.sources.postgres.changes` needs of the server.

Logical decoding (``wal_level = logical``), the wal2json output plugin, a free replication slot
for each consumer that has none yet, the REPLICATION attribute (slot functions refuse anyone
else), and a replica identity that makes every DELETE log the columns that find its document.

wal2json is not an extension, so ``pg_available_extensions`` does not list it. The reliable
probe is the one the run makes: create a temporary logical slot with it, then drop it. Where
that cannot be done yet (``wal_level`` is not logical) a superuser can still ``LOAD`` the
library, which finds it the way decoding would (``dynamic_library_path``).

sparkindex reads slots through the SQL functions (``pg_logical_slot_peek_changes``), not the
replication protocol, so it takes no WAL sender: ``max_wal_senders`` is reported for the other
readers of the server (replicas, backups), and never fails a run.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.preflight.model import Check, Options, Scope, fail, first_line, ok, unreachable, warn
from sparkindex.sources.base import Source
from sparkindex.sources.change_source import WatchedTable
from sparkindex.sources.postgres.changes import PLUGIN
from sparkindex.sources.postgres.slots import slot_name

WAL_LEVEL = "postgres.wal_level"


def check_postgres_changes(
    pipeline: Pipeline, source: Source, tables: Sequence[WatchedTable], options: Options
) -> list[Check]:
    try:
        with source.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            settings = _settings(conn)
            checks = [_wal_level(settings), _privilege(settings)]
            if options.probe_writes:
                checks.append(_wal2json(source.engine, settings))
            checks.append(_slots(conn, pipeline, settings, options.scope))
            checks.append(_wal_senders(settings))
            checks.extend(_replica_identity(conn, tables))
            checks.extend(_filters(pipeline))
    except sa.exc.DBAPIError as exc:
        again = "make sure the source answers, then check again"
        return [fail("postgres.settings", first_line(exc), again, transient=unreachable(exc))]
    return checks


def _settings(conn: sa.Connection) -> dict[str, Any]:
    row = conn.execute(
        sa.text(
            "SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int, "
            "current_setting('max_wal_senders')::int, current_setting('server_version_num')::int, "
            "current_user, current_database(), r.rolreplication, r.rolsuper, "
            "(SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_stat_replication) "
            "FROM pg_roles r WHERE r.rolname = current_user"
        )
    ).one()
    keys = ("wal_level", "max_slots", "max_senders", "version", "user", "database", "replication", "superuser")
    return {**dict(zip(keys, row[:8], strict=True)), "slots_used": int(row[8]), "senders_used": int(row[9])}


def _wal_level(s: dict[str, Any]) -> Check:
    if s["wal_level"] == "logical":
        return ok(WAL_LEVEL, "wal_level = logical")
    return fail(
        WAL_LEVEL,
        f"PostgreSQL has wal_level = {s['wal_level']!r}; change capture needs wal_level = logical",
        "ALTER SYSTEM SET wal_level = logical; then restart the server (or use sync.source: polling)",
    )


def _privilege(s: dict[str, Any]) -> Check:
    name = "postgres.replication_privilege"
    if s["superuser"] or s["replication"]:
        return ok(name, f"role {s['user']!r} has {'superuser' if s['superuser'] else 'REPLICATION'}")
    return fail(
        name,
        f"role {s['user']!r} lacks the REPLICATION attribute; replication slots refuse it",
        f'ALTER ROLE "{s["user"]}" WITH REPLICATION (as a superuser)',
    )


def _wal2json(engine: sa.Engine, s: dict[str, Any]) -> Check:
    name = "postgres.wal2json"
    install = f"apt-get install postgresql-{s['version'] // 10000}-wal2json on the database server"
    if s["wal_level"] == "logical" and (s["replication"] or s["superuser"]):
        probe = f"sparkindex_check_{uuid.uuid4().hex[:12]}"
        statement = "SELECT pg_create_logical_replication_slot(:n, :plugin, true)"  # temporary: gone with the session
        how = f"a temporary slot with {PLUGIN} was created and dropped"
        params: dict[str, str] = {"n": probe, "plugin": PLUGIN}
    elif s["superuser"]:
        statement, how, params = f"LOAD '{PLUGIN}'", f"the {PLUGIN} library loads", {}
    else:
        return warn(name, f"cannot probe for {PLUGIN} before wal_level = logical and REPLICATION", install)
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        conn.execute(sa.text(statement), params)
        if params:
            conn.execute(sa.text("SELECT pg_drop_replication_slot(:n)"), {"n": params["n"]})
    except sa.exc.DBAPIError as exc:
        if isinstance(exc.orig, psycopg.errors.UndefinedFile):
            return fail(name, f"the server lacks the {PLUGIN} output plugin: {first_line(exc)}", install)
        return warn(name, f"could not probe for {PLUGIN}: {first_line(exc)}", install)
    finally:
        conn.invalidate()  # its session ends: a temporary slot a failed drop left goes with it
        conn.close()
    return ok(name, how)


def _slots(conn: sa.Connection, pipeline: Pipeline, s: dict[str, Any], scope: Scope) -> Check:
    """A sync needs its group's slot (made on first start); a reindex that catches up needs one of
    its own while it runs."""
    name = "postgres.replication_slots"
    mine = slot_name(pipeline.sync.slot, s["database"], pipeline.slot_namespace(), pipeline.sync.group)
    exists = conn.execute(sa.text("SELECT 1 FROM pg_replication_slots WHERE slot_name = :n"), {"n": mine}).first()
    free = s["max_slots"] - s["slots_used"]
    group = 0 if exists else 1
    needed = {"check": group, "sync": group, "reindex": group + 1, "documents": 0}[scope]
    detail = f"{s['slots_used']} of max_replication_slots = {s['max_slots']} in use, {free} free"
    raise_to = f"ALTER SYSTEM SET max_replication_slots = {s['slots_used'] + needed + 1}; then restart the server"
    fix = f"{raise_to}, or drop slots nobody reads (pg_replication_slots)"
    if free < needed:
        return fail(name, f"{detail}; this pipeline needs {needed} more", fix)
    if scope == "check" and free < group + 1:
        return warn(name, f"{detail}; a reindex that catches up takes one more while it runs", fix)
    return ok(name, detail + (f"; slot {mine!r} exists" if exists else ""))


def _wal_senders(s: dict[str, Any]) -> Check:
    name = "postgres.wal_senders"
    free = s["max_senders"] - s["senders_used"]
    detail = f"{s['senders_used']} of max_wal_senders = {s['max_senders']} in use"
    if free > 0:
        return ok(name, f"{detail} (sparkindex itself reads slots through SQL functions and needs none)")
    return warn(
        name,
        f"{detail}: replicas and streaming tools cannot connect (sparkindex itself needs no WAL sender)",
        f"ALTER SYSTEM SET max_wal_senders = {s['max_senders'] + 2}; then restart the server",
    )


def _replica_identity(conn: sa.Connection, tables: Sequence[WatchedTable]) -> list[Check]:
    """Every watched table's deletes must log the columns that find the document they touch (the
    id on the root table, the link to the parent on a related one); see ``fanout.link_columns``."""
    name = "postgres.replica_identity"
    quote = conn.dialect.identifier_preparer.quote
    short: list[Check] = []
    full = []
    for table in tables:
        found = conn.execute(
            sa.text("SELECT relreplident, oid FROM pg_class WHERE oid = to_regclass(:t)"), {"t": quote(table.name)}
        ).first()
        if found is None:
            continue  # reported by source.select
        kind, oid = str(found[0]), int(found[1])
        identity = _identity_columns(conn, oid, kind)
        if identity is None:
            full.append(table.name)
            continue
        fix = f"ALTER TABLE {quote(table.name)} REPLICA IDENTITY FULL"
        missing = [c for c in table.link_columns if c not in identity]
        if not identity:
            short.append(
                fail(
                    f"{name}:{table.name}",
                    f"table {table.name!r} has no primary key or replica identity: its updates and deletes log no key",
                    f"add a primary key, or {fix}",
                )
            )
        elif missing:
            short.append(
                fail(
                    f"{name}:{table.name}",
                    f"a delete from {table.name!r} must reveal {', '.join(missing)} ({_role(table.where)}) to find "
                    f"its document, but its replica identity logs only {', '.join(identity)}",
                    fix,
                )
            )
    if short:
        return short
    detail = f"deletes of {len(tables)} table(s) log the columns that find their documents"
    return [ok(name, detail + (f" (FULL: {', '.join(full)})" if full else ""))]


def _filters(pipeline: Pipeline) -> list[Check]:
    """Row filters need no old values: a change re-reads its row by key, so a row leaving a
    filter is found by the key its replica identity already logs, and its document removed."""
    filtered = [f"indexes[{i}] ({index.table})" for i, index in enumerate(pipeline.indexes) if index.where]
    for i, index in enumerate(pipeline.indexes):
        filtered += _filtered_relations(index.relations, f"indexes[{i}]")
    if not filtered:
        return []
    return [
        ok(
            "postgres.replica_identity.filters",
            f"the row filters of {', '.join(filtered)} need no REPLICA IDENTITY FULL: a changed row is re-read "
            "by its key and filtered then, so a row leaving a filter loses its document on the key alone",
        )
    ]


def _filtered_relations(relations: Sequence[Any], key: str) -> list[str]:
    """``key.relations[j] (table)`` of every relation below *key* that has a row filter."""
    out: list[str] = []
    for j, rel in enumerate(relations):
        if rel.where is not None:
            out.append(f"{key}.relations[{j}] ({rel.table})")
        out += _filtered_relations(rel.relations, f"{key}.relations[{j}]")
    return out


def _role(where: str) -> str:
    """What the columns are to the document, from where fanout found them (``id`` or a relation)."""
    return "the document id" if where == "id" else f"the link of {where} to its parent"


def _identity_columns(conn: sa.Connection, oid: int, kind: str) -> list[str] | None:
    """The columns a DELETE logs: None for all (FULL), [] for none."""
    if kind == "f":
        return None
    if kind == "n":
        return []
    flag = "indisprimary" if kind == "d" else "indisreplident"
    rows = conn.execute(
        sa.text(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            f"AND a.attnum = ANY(i.indkey) WHERE i.indrelid = :oid AND i.{flag}"
        ),
        {"oid": oid},
    )
    return [str(r[0]) for r in rows]
