"""Polling change capture: each polled table's ``changes`` column exists, is monotone in type
(integers or date/times, the rule of :func:`~sparkindex.documents.key_rules.check_version_column`)
and is indexed.

Which column polls which table comes from :func:`~sparkindex.capture.polling_config.plan_polling`,
as the sync reads it (per-table overrides, several indexes merged). A column without an index
still works, but every poll reads the whole table, so that is a warning, not a failure.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sparkindex.capture.polling_config import plan_polling
from sparkindex.config.model import Pipeline
from sparkindex.documents.key_rules import check_version_column
from sparkindex.errors import ConfigError, TransientError
from sparkindex.preflight.model import Check, fail, ok, warn
from sparkindex.preflight.source import indexes_of, tables_of
from sparkindex.sources.base import Source, TableInfo


def check_polling(pipeline: Pipeline, source: Source, aliases: Sequence[str]) -> list[Check]:
    try:
        plan = plan_polling(pipeline)
    except ConfigError as exc:
        return [fail("polling.config", str(exc), "add changes: {column: updated_at} to the index")]
    tables = [t for _, idx in indexes_of(pipeline, aliases) for t in tables_of(idx)]
    tables += [t for t in plan.tombstones if t not in tables]
    checks: list[Check] = []
    for table in dict.fromkeys(tables):
        column = plan.column(table)
        found = plan.tables.get(table)
        where = f"{pipeline.origin}: {found.where if found is not None else 'indexes[].changes'}"
        try:
            info = source.table(table)
        except (ConfigError, TransientError):
            continue  # reported by source.select
        try:
            check_version_column(info, column, f"{where}.column")
            if table in plan.tombstones:
                info.require_columns(["tbl", "row_key"], f"{where}.tombstones")
        except ConfigError as exc:
            checks.append(fail(f"polling.column:{table}", str(exc), _column_fix(info, column)))
            continue
        checks.append(ok(f"polling.column:{table}", f"{table}.{column} is {_type(info, column)}: monotone in type"))
        checks.append(_indexed(source, info, column))
    return checks


def _type(info: TableInfo, column: str) -> str:
    try:
        return str(info.columns[column].type)
    except Exception:  # noqa: BLE001 - a dialect type that cannot render without its dialect
        return type(info.columns[column].type).__name__


def _column_fix(info: TableInfo, column: str) -> str:
    if column not in info.columns:
        return (
            f"ALTER TABLE {info.name} ADD COLUMN {column} TIMESTAMP, set by every insert and update (a trigger or "
            "the application), or name an existing one in changes.column / changes.tables"
        )
    return f"poll by a timestamp or integer column (a row version, updated_at); {column!r} cannot order changes"


def _indexed(source: Source, info: TableInfo, column: str) -> Check:
    """An index (or the primary key) that leads with the column lets a poll read only new rows."""
    name = f"polling.index:{info.name}"
    leading = [tuple(info.primary_key)] if info.primary_key else []
    try:
        leading += [
            tuple(str(c) for c in ix["column_names"]) for ix in sa.inspect(source.engine).get_indexes(info.name)
        ]
    except sa.exc.DBAPIError as exc:
        return warn(name, f"could not list the indexes of {info.name!r}: {exc.orig}", None)
    if any(cols and cols[0] == column for cols in leading):
        return ok(name, f"{info.name}.{column} is indexed")
    key = ", ".join((column, *info.primary_key))
    return warn(
        name,
        f"no index of {info.name!r} starts with {column!r}: every poll reads the whole table",
        f"CREATE INDEX {info.name}_{column}_idx ON {info.name} ({key})",
    )
