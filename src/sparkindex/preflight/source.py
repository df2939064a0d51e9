"""The source: reachable, every table the pipeline reads readable, ids the database keeps
unique and NOT NULL, and each index's configuration resolvable against the schema.

The id rule and the plan are the reindex's own (:func:`~sparkindex.documents.key_rules.check_unique_id`,
:func:`~sparkindex.documents.planning.resolve_plans`), so a preflight passes exactly what a run accepts
and fails with the run's own words. Nothing here writes: a SQLite file that does not exist is
reported, not created (SQLite would create an empty one on connect).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.documents.key_rules import check_unique_id
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import ConfigError, SparkIndexError, TransientError
from sparkindex.extras import fix_for
from sparkindex.preflight.model import Check, Options, fail, first_line, ok, unreachable
from sparkindex.resources import open_source_url
from sparkindex.sources.base import Source, TableInfo

#: statement timeout of the preflight's own queries: each reads at most one row or the catalog
STATEMENT_TIMEOUT_S = 30.0


@dataclass
class SourceFindings:
    """What later checks (change capture, polling) build on: the open source, when it answered,
    and the plans that resolved."""

    source: Source | None = None
    plans: dict[str, IndexPlan] = field(default_factory=dict)
    #: False once the source stopped answering part-way: nothing more is asked of it
    answering: bool = True

    @property
    def sql(self) -> bool:
        return self.source is not None and getattr(self.source, "engine", None) is not None


def with_connect_timeout(url: str, seconds: float) -> str:
    """*url* with a connect timeout (psycopg and mysqlclient both read ``connect_timeout``), so an
    unreachable host fails the check in seconds instead of a TCP timeout of minutes."""
    parsed = sa.make_url(normalize_url(url))
    if parsed.get_backend_name() not in ("postgresql", "mysql") or "connect_timeout" in parsed.query:
        return url
    return parsed.update_query_dict({"connect_timeout": str(max(1, round(seconds)))}).render_as_string(
        hide_password=False
    )


def tables_of(idx: IndexConfig) -> Iterator[str]:
    """The index's root table and every relation's table, in the order the config names them."""
    yield idx.table
    yield from _relation_tables(idx.relations)


def _relation_tables(relations: Sequence[RelationConfig]) -> Iterator[str]:
    for rel in relations:
        yield rel.table
        yield from _relation_tables(rel.relations)


def indexes_of(pipeline: Pipeline, aliases: Sequence[str]) -> list[tuple[int, IndexConfig]]:
    return [(i, idx) for i, idx in enumerate(pipeline.indexes) if idx.alias in aliases]


def check_source(pipeline: Pipeline, aliases: Sequence[str], options: Options) -> tuple[list[Check], SourceFindings]:
    url = pipeline.source_url()
    shown = redact_url(url)
    missing = _missing_sqlite_file(url)
    if missing is not None:
        return [
            fail(
                "source.reachable",
                f"{shown}: no such database file {missing}",
                "correct source.url (a relative sqlite:/// path is relative to the pipeline file)",
            )
        ], SourceFindings()
    try:
        source = open_source_url(
            with_connect_timeout(url, options.connect_timeout_s), STATEMENT_TIMEOUT_S, base_dir=pipeline.base_dir
        )
    except ConfigError as exc:
        fix = fix_for(exc, "use a sqlite://, postgresql:// or mysql:// URL")
        return [fail("source.url", str(exc), fix)], SourceFindings()
    findings = SourceFindings(source)
    if findings.sql:
        reached = _reachable(source, shown)
        if reached.status != "OK":
            source.close()
            return [reached], SourceFindings()
        checks = [reached]
    else:
        checks = []  # an index to rebuild: each index's check below reaches it
    tables = list(dict.fromkeys(t for _, idx in indexes_of(pipeline, aliases) for t in tables_of(idx)))
    readable = {}
    for table in tables:
        check = _readable(source, table, findings.sql)
        readable[table] = check.status == "OK"
        checks.append(check)
        if check.transient:  # the server went away: what follows would say so again and again
            findings.answering = False
            return checks, findings
    for i, idx in indexes_of(pipeline, aliases):
        if not readable.get(idx.table):
            continue
        where = f"{pipeline.origin}: indexes[{i}]"
        id_check = _ids(source, idx, where)
        checks.append(id_check)
        if id_check.status == "OK":
            checks.append(_plan(pipeline, source, idx, where, findings))
    return checks, findings


def _missing_sqlite_file(url: str) -> str | None:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database.startswith(":memory:"):
        return None
    path = parsed.database.removeprefix("file:").split("?", 1)[0]
    return None if Path(path).is_file() else path


def _reachable(source: Source, shown: str) -> Check:
    try:
        with source.engine.connect() as conn:
            conn.execute(sa.select(sa.literal(1)))
    except sa.exc.DBAPIError as exc:
        return fail(
            "source.reachable",
            f"{shown}: {first_line(exc)}",
            "start the database, or correct the host, port, database, user and password in source.url",
            transient=unreachable(exc),
        )
    return ok("source.reachable", f"{shown} answers")


def _readable(source: Source, table: str, sql: bool) -> Check:
    """The table exists and this user may SELECT from it (one row read, nothing kept)."""
    name = f"source.select:{table}"
    try:
        info = source.table(table)
        if sql:
            with source.engine.connect() as conn:
                conn.execute(sa.select(sa.literal(1)).select_from(info.table).limit(1)).all()
    except ConfigError as exc:
        return fail(
            name,
            str(exc),
            "correct the table name in the pipeline, or create the table (on MySQL/MariaDB a table the user may not "
            "read looks missing: GRANT SELECT on it)",
        )
    except TransientError as exc:
        return fail(name, str(exc), "make sure the source answers, then check again", transient=True)
    except sa.exc.DBAPIError as exc:
        if isinstance(exc, sa.exc.OperationalError) and unreachable(exc):
            return fail(name, first_line(exc), "make sure the source answers, then check again", transient=True)
        user = sa.make_url(source.url).username or "<user>"
        return fail(name, f"cannot read table {table!r}: {first_line(exc)}", f"GRANT SELECT ON {table} TO {user}")
    except SparkIndexError as exc:
        return fail(name, str(exc), "correct the table name in the pipeline")
    return ok(name, f"table {table!r} is readable")


def _ids(source: Source, idx: IndexConfig, where: str) -> Check:
    """The document ids: the primary key, or ``id:`` columns a unique key covers, all NOT NULL."""
    name = f"source.id:{idx.alias}"
    info = source.table(idx.table)
    columns = list(idx.id) if idx.id else list(info.primary_key)
    if not columns:
        return fail(
            name,
            f"{where}.id: table {idx.table!r} has no primary key",
            f"add one (ALTER TABLE {idx.table} ADD PRIMARY KEY (...)), or set {where.split(': ')[-1]}.id to "
            "columns a unique NOT NULL key covers",
        )
    try:
        info.require_columns(columns, f"{where}.id")
        check_unique_id(info, columns, f"{where}.id")
    except ConfigError as exc:
        return fail(name, str(exc), _id_fix(info, columns))
    shown = ", ".join(columns)
    how = "the primary key" if set(columns) == set(info.primary_key) else "a unique key, NOT NULL"
    return ok(name, f"ids ({shown}) of table {idx.table!r} are {how}")


def _id_fix(info: TableInfo, columns: Sequence[str]) -> str:
    absent = [c for c in columns if c not in info.columns]
    if absent:
        return f"name existing columns of table {info.name!r} in id (columns: {', '.join(info.columns)})"
    nullable = [c for c in columns if info.columns[c].nullable and c not in info.primary_key]
    if nullable:
        return f"declare {', '.join(nullable)} NOT NULL (no row may hold NULL there), or use the primary key as id"
    cols = ", ".join(columns)
    return f"CREATE UNIQUE INDEX ON {info.name} ({cols}) if the values are unique, or use the primary key as id"


def _plan(pipeline: Pipeline, source: Source, idx: IndexConfig, where: str, findings: SourceFindings) -> Check:
    """The index as the reindex resolves it: columns, relations and their keys, the version column."""
    from sparkindex.documents.planning import resolve_plans

    name = f"source.plan:{idx.alias}"
    try:
        plans = resolve_plans(pipeline, source, [idx.alias])
    except ConfigError as exc:
        return fail(name, str(exc), f"correct the key named above in {pipeline.origin}")
    except TransientError as exc:
        return fail(name, str(exc), "make sure the source answers, then check again", transient=True)
    plan = plans[idx.alias][0]
    findings.plans[idx.alias] = plan
    relations = _count_relations(idx.relations)
    return ok(name, f"table {idx.table!r}, {len(plan.emit)} columns, {relations} relation(s) resolve")


def _count_relations(relations: Sequence[RelationConfig]) -> int:
    return sum(1 + _count_relations(r.relations) for r in relations)
