"""``init --where``: a row filter for the one index it belongs to, tried on the database first.

The filter is SQL in the source's own dialect, so only the database can say whether it is valid:
the plan's own check runs it (:func:`sparkindex.sources.expressions.check_filter`, a statement over
the table that reads no row), so init accepts exactly the filters a reindex accepts, and a refusal
is the user's error (exit 2), naming ``--where`` and the database's own message, before any
file is written. ``init`` may propose several indexes; a filter is over one table's columns, so it
goes to the one index ``--table`` names, or to the only one ``init`` chose, and is refused when
that is ambiguous rather than guessed.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkindex.errors import ConfigError, UsageError
from sparkindex.scaffold.relations import IndexDraft
from sparkindex.sources.base import Source
from sparkindex.sources.expressions import check_filter as check_sql_filter


def apply_where(drafts: Sequence[IndexDraft], tables: Sequence[str] | None, where: str | None, source: Source) -> None:
    """Set *where* on the draft it belongs to, once the database accepts it; no-op without one."""
    if where is None:
        return
    expr = where.strip()
    if not expr:
        raise UsageError("--where: empty; give a boolean SQL expression over the table's columns (deleted_at IS NULL)")
    draft = _target(drafts, tables)
    check_filter(source, draft.table, expr)
    draft.where = expr


def _target(drafts: Sequence[IndexDraft], tables: Sequence[str] | None) -> IndexDraft:
    named = list(dict.fromkeys(tables or []))
    if len(named) > 1:
        raise UsageError(
            f"--where filters one table, and --table names {len(named)} ({', '.join(named)}); run init with one "
            "--table for the filtered index, or add where: to the indexes by hand"
        )
    usable = [d for d in drafts if d.usable]
    if named:
        found = [d for d in usable if d.table == named[0]]
        if not found:  # the table was written commented out (init says why); nothing to filter
            raise UsageError(f"--where: table {named[0]!r} cannot be indexed, so there is nothing to filter")
        return found[0]
    if len(usable) > 1:
        raise UsageError(
            f"--where filters one table, and init chose {len(usable)} ({', '.join(d.table for d in usable)}); "
            "name the one to filter with --table"
        )
    return usable[0]


def check_filter(source: Source, table: str, expr: str) -> None:
    """Raise :class:`UsageError` naming ``--where`` and the database's message if the database
    cannot evaluate *expr* over *table*'s rows: the plan's own check, so init accepts exactly the
    filters a reindex does."""
    try:
        check_sql_filter(source, source.table(table), expr, "--where")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


__all__ = ["apply_where", "check_filter"]
