"""Proposing change capture from what the server supports, judged by the sync's own checks.

Whether the log can be followed is decided by the same ``check()`` that ``sparkindex sync`` and
a reindex's catch-up run (wal_level and replica identities on PostgreSQL; log_bin, binlog
formats, GTIDs and grants on MariaDB), against the pipeline being written. Only a proposal that
passes is written active: a ``sync:`` section makes every reindex catch up through the log, so
one that cannot work would stop the reindex. A log blocked only by per-table settings is written
commented out with the statements that unblock it. Otherwise polling is proposed when every
table has a monotone change column, and failing that a comment says why there is none.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from sparkindex.config.model import Pipeline
from sparkindex.config.sync import ChangesConfig, SyncConfig
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.errors import SparkIndexError
from sparkindex.scaffold.connect import first_line
from sparkindex.scaffold.reflect import SchemaGraph, TableFacts
from sparkindex.sources.base import Source

#: column names that usually hold a row's last change, in order of preference
CHANGE_COLUMNS = (
    "updated_at",
    "updatedat",
    "updated_on",
    "last_updated",
    "last_updated_at",
    "last_modified",
    "last_modified_at",
    "modified_at",
    "modified_on",
    "date_modified",
    "modified",
    "updated",
    "changed_at",
    "last_update",
    "update_time",
    "mtime",
)
#: the consumer name the checks run under (they create nothing: no slot, no offset)
CONSUMER = "init-check"


@dataclass(frozen=True)
class Polling:
    column: str
    #: per-table columns where a table of the index's tree names its change column otherwise
    tables: dict[str, str]


@dataclass
class CaptureProposal:
    mode: Literal["log", "polling", "none"]
    notes: list[str]
    #: the ``sync:`` section: written active for log and polling, else commented out if present
    sync: dict[str, str] | None = None
    polling: dict[str, Polling] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.mode != "none"


def propose_capture(
    pipeline: Pipeline, source: Source, graph: SchemaGraph, plans: dict[str, IndexPlan]
) -> CaptureProposal:
    server, tables = _log_problems(pipeline, source, plans)
    if server is None and not tables:
        return CaptureProposal("log", [_log_text(source)], {"source": "log"})
    polling, why_not = _polling(pipeline, source, graph, plans)
    log_reason = server or "; ".join(tables)
    if polling is not None:
        notes = [_polling_text(polling, graph, plans)]
        if source.dialect_name != "sqlite":
            notes.append(f"(not the log: {log_reason})")
        return CaptureProposal("polling", notes, {"source": "polling"}, polling)
    if server is None:
        notes = [
            f"Change capture: {_log_text(source)}",
            "It needs every table to log what its deletes must reveal first; run these, then uncomment sync:",
            *(f"  - {p}" for p in tables),
            f"(polling instead: {why_not})",
        ]
        return CaptureProposal("none", notes, {"source": "log"})
    reasons = ["SQLite keeps no change log" if source.dialect_name == "sqlite" else log_reason, why_not]
    notes = [
        "No change capture proposed: " + "; ".join(reasons) + ".",
        "Until there is, `sparkindex reindex` rebuilds the indexes from scratch whenever it runs.",
    ]
    return CaptureProposal("none", notes)


def _log_problems(pipeline: Pipeline, source: Source, plans: dict[str, IndexPlan]) -> tuple[str | None, list[str]]:
    """(what stops the server's log being followed at all, what each table still needs)."""
    from sparkindex.capture.fanout import FanOut
    from sparkindex.capture.session import watched_tables
    from sparkindex.capture.source import LOG_SOURCES, open_change_source
    from sparkindex.sources.change_source import WatchedTable

    if source.dialect_name not in LOG_SOURCES:
        return f"{source.dialect_name} has no change log sparkindex can read", []
    candidate = pipeline.model_copy(update={"sync": SyncConfig(source="log")})
    merged = watched_tables([FanOut(p, source) for p in plans.values()])
    tables = [WatchedTable(t.name, t.link_columns, "") for t in merged]

    def refused(watched: list[WatchedTable]) -> str | None:
        try:
            changes = open_change_source(candidate, source, watched, CONSUMER)
        except SparkIndexError as exc:
            return _reason(exc)
        try:
            changes.check()
        except SparkIndexError as exc:
            return _reason(exc)
        finally:
            changes.close()
        return None

    server = refused([]) or _server_prerequisites(candidate, source)
    if server is not None or refused(tables) is None:
        return server, []
    return None, [p for t in tables if (p := refused([t])) is not None]


def _server_prerequisites(pipeline: Pipeline, source: Source) -> str | None:
    """What ``check`` fails on the server that the change source's own check leaves to the first
    slot or binlog read (the REPLICATION privilege, the wal2json plugin, a free slot, grants):
    a ``sync:`` written active there would make ``check`` and the first ``reindex`` refuse the
    file init just wrote."""
    from sparkindex.preflight.model import Options

    if source.dialect_name == "postgresql":  # each check imports its own database's driver
        from sparkindex.preflight.changes_postgres import check_postgres_changes as probe
    else:
        from sparkindex.preflight.changes_mysql import check_mysql_changes as probe
    failed = [c for c in probe(pipeline, source, [], Options(scope="sync")) if c.status == "FAIL"]
    return "; ".join(f"{c.detail} ({c.fix})" if c.fix else c.detail for c in failed) or None


def _reason(exc: BaseException) -> str:
    return first_line(exc).removeprefix(": ").removeprefix("source.url: ")


def _log_text(source: Source) -> str:
    if source.dialect_name == "postgresql":
        return (
            "PostgreSQL has wal_level = logical, so `sparkindex sync` follows every change by logical decoding "
            "(a replication slot per consumer group, read with the wal2json output plugin, which the server must "
            "have: postgresql-<version>-wal2json), and each reindex replays what changed while it ran before it "
            "swaps the alias. A slot keeps WAL until it is read: run the sync, or `sparkindex sync --drop-slot` "
            "when you stop using it."
        )
    return (
        "MariaDB writes a row-based binlog with GTIDs, so `sparkindex sync` follows every change from it, and "
        "each reindex replays what changed while it ran before it swaps the alias. Keep binlogs long enough for "
        "a sync that was stopped to resume (a purged position is a gap that sync reconciles by verify and repair)."
    )


def change_column(table: TableFacts) -> str | None:
    by_name = {c.name.lower(): c.name for c in table.columns if c.version_like}
    return next((by_name[n] for n in CHANGE_COLUMNS if n in by_name), None)


def _tree(plan: IndexPlan) -> Iterator[str]:
    yield plan.table.name
    yield from _relation_tables(plan.relations)


def _relation_tables(relations: list[RelationPlan]) -> Iterator[str]:
    for rel in relations:
        yield rel.table.name
        yield from _relation_tables(rel.children)


def _polling(
    pipeline: Pipeline, source: Source, graph: SchemaGraph, plans: dict[str, IndexPlan]
) -> tuple[dict[str, Polling] | None, str]:
    """Per alias, how to poll it (None when some table has no change column), and why not."""
    columns = {name: change_column(graph.table(name)) for plan in plans.values() for name in _tree(plan)}
    missing = sorted(name for name, col in columns.items() if col is None)
    if missing:
        wanted = ", ".join(CHANGE_COLUMNS[:3])
        return None, f"no change column ({wanted}, ... of an integer or date/time type) in {', '.join(missing)}"
    proposal: dict[str, Polling] = {}
    for alias, plan in plans.items():
        root = columns[plan.table.name]
        assert root is not None
        others = {name: col for name in dict.fromkeys(_tree(plan)) if (col := columns[name]) and col != root}
        proposal[alias] = Polling(root, dict(sorted(others.items())))
    problem = _polling_refused(pipeline, source, plans, proposal)
    return (None, problem) if problem is not None else (proposal, "")


def _polling_refused(
    pipeline: Pipeline, source: Source, plans: dict[str, IndexPlan], proposal: dict[str, Polling]
) -> str | None:
    from sparkindex.capture.fanout import FanOut
    from sparkindex.capture.session import watched_tables
    from sparkindex.capture.source import open_change_source

    candidate = pipeline.model_copy(deep=True, update={"sync": SyncConfig(source="polling")})
    for idx in candidate.indexes:
        poll = proposal[idx.alias]
        idx.changes = ChangesConfig(column=poll.column, tables=poll.tables)
    tables = watched_tables([FanOut(p, source) for p in plans.values()])
    try:
        changes = open_change_source(candidate, source, tables, CONSUMER)
        try:
            changes.check()
        finally:
            changes.close()
    except SparkIndexError as exc:
        return _reason(exc)
    return None


def _polling_text(polling: dict[str, Polling], graph: SchemaGraph, plans: dict[str, IndexPlan]) -> str:
    columns = sorted({p.column for p in polling.values()} | {c for p in polling.values() for c in p.tables.values()})
    integers = [c for c in columns if _is_integer(c, graph, plans)]
    text = (
        f"Change capture by polling: every table has a change column ({', '.join(columns)}), so `sparkindex sync` "
        "re-reads the rows whose column moved forward; every write must set it. Deletes are found by comparing "
        "keys every changes.key_diff_every_s (300 s), or at once from a tombstones table (changes.tombstones)."
    )
    if integers:
        late = "a commit that lands behind the position is missed"
        text += f" An integer change column ({', '.join(integers)}) must grow in commit order: {late}."
    return text


def _is_integer(column: str, graph: SchemaGraph, plans: dict[str, IndexPlan]) -> bool:
    for plan in plans.values():
        for name in _tree(plan):
            table = graph.table(name)
            if column in table.column_names and "INT" in table.column(column).type_name.upper():
                return True
    return False
