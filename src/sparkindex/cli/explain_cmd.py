"""``sparkindex explain``: what a document will look like, and how it is built, before any run.

The work is :func:`sparkindex.api.explain`'s; this module renders its result: sections for a
reader, or with ``--json`` the result's ``to_dict()`` on the last line for a script. A row that cannot be indexed
(it would go to the dead-letter store) exits 1, like a run that ends with errors.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from sparkindex import api
from sparkindex.cli.options import StateDirOpt
from sparkindex.cli.render import emit_json, err, out

if TYPE_CHECKING:
    from sparkindex.jobs.explain_shape import DocumentShape


def explain(
    config: Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")],
    state_dir: StateDirOpt = None,
    index: Annotated[
        str | None, typer.Option("--index", "-i", help="alias to explain; default the first in the file")
    ] = None,
    doc_id: Annotated[
        str | None,
        typer.Option("--id", help="document id (composite keys: parts joined by '|'); default the first by key"),
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="print one JSON object on the last line")] = False,
) -> None:
    """Show one real document, its shape and mapping, the builder's statements, the partition plan; writes nothing."""
    result = api.explain(api.load(config, state_dir), index, doc_id=doc_id)
    if json:
        emit_json(result.to_dict())
    else:
        render(result)
    raise typer.Exit(result.outcome.exit_code)


#: control characters in a statement (the in-database builder's mark, \x01) are shown escaped
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _escaped(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def _pretty(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


def _say(text: str = "") -> None:
    out.print(text, markup=False, highlight=False)


def render(result: api.ExplainResult) -> None:
    """The explanation as sections; user values are never Rich markup."""
    e = result.explanation
    others = f" (other indexes: {', '.join(e.other_aliases)}; pick one with --index)" if e.other_aliases else ""
    _say(f"index {e.alias}: table {e.table}, id {', '.join(e.id_columns)}, source {e.source}{others}")
    _say()
    _shape(e.shape)
    _say()
    if e.canonical is not None:
        _say(f"── document {e.doc_id} ({len(e.canonical):,} bytes canonical, content hash {e.hash})")
        _say(_pretty(e.document))
    elif e.failure is not None:
        _say(f"── document {e.doc_id} cannot be indexed (it would go to the dead-letter store)")
        _say(e.failure)
        err.print(f"document {e.doc_id} cannot be indexed: {e.failure}", markup=False, highlight=False)
    elif e.filtered is not None:
        _say(f"── no document: {e.filtered}")
    else:
        _say(f"── no document: table {e.table} is empty" + (" (or no row passes its filter)" if e.shape.filter else ""))
    _say()
    b = e.build
    _say(f"── build: {b.path} ({b.builder})")
    _say(b.reason)
    if b.document is not None:
        _say(f"this document: {b.document}")
    _say()
    _say("── statements of one page (a page here is 1 row; the reindex reads page_size rows per page)")
    if not e.statements:
        _say("none: the documents are read from an index, not built with SQL")
    for n, statement in enumerate(e.statements, 1):
        _say(f"{n}. {_escaped(statement)}")
    _say()
    _say("── mapping (inferred from the schema, with the pipeline's fields and mapping overrides)")
    _say(_pretty(e.mapping))
    if e.settings:
        _say("settings: " + orjson.dumps(e.settings, option=orjson.OPT_SORT_KEYS).decode())
    _say()
    p = e.partitions
    _say(
        f"── partitions: {p.count:,} for {p.source_rows:,} rows, about {p.rows_per_partition:,} rows each "
        f"(partition_size {p.partition_size:,}), complexity {p.complexity:g}, {p.work_units:,} work units, "
        f"priority {p.priority}"
    )
    if p.largest:
        _say("largest first" + ("" if p.counted else " (in claim order; rows estimated, too many to count)") + ":")
        for v in p.largest:
            rows = f"{v.rows:,} rows" if v.rows is not None else f"~{v.estimated_rows:,} rows"
            lo = "start" if v.after is None else f"after {v.after}"
            hi = "end" if v.upto is None else f"up to {v.upto}"
            _say(f"  #{v.index}: {rows}, {v.work_units:,} work units, keys {lo} .. {hi}")


def _shape(shape: DocumentShape) -> None:
    """Which rows make documents and what they hold; one line when nothing is shaped."""
    if shape.plain:
        _say("── shape: every row, every column as it is (no where, from, exclude, computed, routing or transform)")
        return
    _say("── shape")
    if shape.filter is not None:
        _say(f"rows: only where `{shape.filter}`")
    for path, where in shape.relation_filters.items():
        _say(f"rows of {path}: only where `{where}`")
    if shape.renamed:
        _say("renamed: " + ", ".join(f"{path} ← {column}" for path, column in shape.renamed.items()))
    if shape.excluded:
        _say("excluded: " + ", ".join(shape.excluded))
    for c in shape.computed:
        typed = f"{c.mapping_type} in the mapping" if c.mapping_type is not None else "not in the mapping"
        _say(f"computed: {c.path} = {c.expression}  (the database's {c.database_type}: {typed})")
    if shape.routing is not None:
        _say(f"routing: each document's _routing is the value of its {shape.routing}")
    if shape.deletes == "soft":
        _say("deletes: soft (a deleted or filtered-out row's document stays, with _deleted: true and _deleted_at)")
    else:
        _say("deletes: hard (a deleted or filtered-out row's document is removed)")
    t = shape.transform
    if t is not None:
        when = (
            f"on_change: {', '.join(t['on_change'])} (it runs where these changed since its last run, elsewhere its "
            "fields come from the coordination store's cache; explain runs it, without the cache)"
            if t["on_change"]
            else "it runs for every document built"
        )
        _say(f"transform: {t['function']}, version {t['version']} (part of every content hash); {when}")
