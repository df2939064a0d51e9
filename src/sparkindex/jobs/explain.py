"""``sparkindex explain``: one real document, its mapping, how it is built, and the partition plan.

Why: nothing else shows the document before the first full run. A user who adds a relation
or a field override wants to see the result in seconds, not after a job. So this runs the
reindex's own code, not a look-alike: the plan and mapping from :func:`~sparkindex.documents.planning.resolve_plan`,
the builder from :func:`~sparkindex.documents.builder.choose_builder` (the very class Spark tasks
build with, so the canonical bytes and their content hash are those the reindex writes), and the
partition calculator the planner calls. A shaped index shows its shape (:mod:`.explain_shape`)
beside a document built through it; a row asked for by id that a filter keeps out of the index is
no error: the row is looked up in its table without the filter, and the answer says which filter
leaves it out (``row 42: filtered out by `deleted_at IS NULL```).

It writes nothing anywhere: only the source is opened (read), never the coordination store or the
target (opening a Tantivy target creates its directory; what the target can hold is read from its
class). A SQLite source file that does not exist is refused rather than created by the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.config.indexes import IndexConfig
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, Page, choose_builder
from sparkindex.documents.join import child_id
from sparkindex.documents.mapping import Mapping
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.planning import check_target_capabilities, resolve_plan
from sparkindex.documents.source_lookup import ChildRef, Key, SourceLookup
from sparkindex.errors import ConfigError, DocumentError, UsageError
from sparkindex.jobs.explain_partitions import PartitionPlan, explain_partitions
from sparkindex.jobs.explain_shape import DocumentShape, describe_shape
from sparkindex.keys import document_id
from sparkindex.resources import open_source
from sparkindex.sources.base import KeyRange, Source


@dataclass(frozen=True)
class BuildPath:
    """How the documents of an index are built, and why."""

    #: "python", "in-database", "server-written JSON" or "copied" (from another index)
    path: str
    builder: str
    reason: str
    #: how the document shown took its way (a value the server cannot write canonically sends
    #: that one document through the decoding path); None without a document
    document: str | None = None


@dataclass(frozen=True)
class Explanation:
    alias: str
    table: str
    id_columns: list[str]
    source: str  # redacted
    #: other indexes of the pipeline, shown with --index
    other_aliases: list[str]
    doc_id: str | None
    #: the canonical JSON the reindex writes (None: the table is empty, or the row failed)
    canonical: bytes | None
    hash: str | None
    #: why the row cannot be indexed, as the dead-letter store would record it
    failure: str | None
    build: BuildPath
    #: the statements one keyset page of the reindex runs, as the driver received them
    statements: list[str]
    mapping: Mapping
    settings: dict[str, Any]
    partitions: PartitionPlan
    #: the filters, renames, left-out columns, computed fields, routing, deletes and transform
    shape: DocumentShape
    #: the row asked for exists but a filter keeps it out of the index: which, in a sentence
    #: (``row 42: filtered out by `deleted_at IS NULL```); the document is then None
    filtered: str | None = None

    @property
    def document(self) -> Any:
        return None if self.canonical is None else orjson.loads(self.canonical)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "table": self.table,
            "id_columns": self.id_columns,
            "source": self.source,
            "other_aliases": self.other_aliases,
            "id": self.doc_id,
            "document": self.document,
            "canonical": None if self.canonical is None else self.canonical.decode("utf-8"),
            "hash": self.hash,
            "failure": self.failure,
            "build": asdict(self.build),
            "statements": self.statements,
            "mapping": self.mapping,
            "settings": self.settings,
            "partitions": self.partitions.to_dict(),
            "shape": self.shape.to_dict(),
            "filtered": self.filtered,
        }


def explain(pipeline: Pipeline, alias: str | None = None, doc_id: str | None = None) -> Explanation:
    """Explain index *alias* (the pipeline's first when None) with the document *doc_id* (the
    first by key when None). Unknown aliases and ids raise :class:`UsageError` (exit 2)."""
    i, cfg = _index(pipeline, alias)
    with _open_source(pipeline) as source:
        plan, mapping = resolve_plan(source, cfg, f"{pipeline.origin}: indexes[{i}]")
        check_target_capabilities(pipeline, {cfg.alias: (plan, mapping)})
        choice = choose_builder(source, plan)
        builder = choice.cls(source, plan)
        with _statements(source) as statements:
            first = builder.page(KeyRange(None, None), None, 1)  # the reindex's page, one row long
        found = _first(first, choice.path == "copied") if doc_id is None else _by_id(source, plan, builder, doc_id)
        built = None if isinstance(found, str) else found
        return Explanation(
            alias=cfg.alias,
            table=plan.table.name,
            id_columns=list(plan.id_columns),
            source=redact_url(pipeline.source.url),
            other_aliases=[x.alias for x in pipeline.indexes if x.alias != cfg.alias],
            doc_id=doc_id if built is None else built.doc_id if isinstance(built, DocumentError) else built.id,
            canonical=built.source if isinstance(built, BuiltDocument) else None,
            hash=built.hash if isinstance(built, BuiltDocument) else None,
            failure=f"{built.error_class}: {built.reason}" if isinstance(built, DocumentError) else None,
            build=_build_path(choice.path, choice.reason, builder, built),
            statements=statements,
            mapping=mapping,
            settings=cfg.settings.to_target(),
            partitions=explain_partitions(source, plan, pipeline.job),
            shape=describe_shape(plan, mapping),
            filtered=found if isinstance(found, str) else None,
        )


def _index(pipeline: Pipeline, alias: str | None) -> tuple[int, IndexConfig]:
    cfg = pipeline.indexes[0] if alias is None else pipeline.index(alias)  # UsageError naming the known
    return pipeline.indexes.index(cfg), cfg


def _open_source(pipeline: Pipeline) -> Source:
    """The source, read only; a SQLite file that does not exist is an error, not a new file."""
    url = pipeline.source_url()
    if url.startswith("sqlite:"):
        database = sa.make_url(url).database
        if database and not database.startswith(":memory:") and not Path(database).exists():
            raise ConfigError(f"{pipeline.origin}: source.url: the SQLite file {database} does not exist")
    return open_source(pipeline)


@contextlib.contextmanager
def _statements(source: Source) -> Iterator[list[str]]:
    """Collect the text of every statement the source's driver runs meanwhile (repeats once)."""
    seen: list[str] = []
    engine = getattr(source, "engine", None)  # an index as the source runs no SQL
    if engine is None:
        yield seen
        return

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        text = " ".join(_readable(conn, statement, context).split())
        if text not in seen:
            seen.append(text)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def _readable(conn: Any, statement: str, context: Any) -> str:
    """The statement with its values written in (the canonical JSON's keys are bound values: as
    placeholders, PostgreSQL's statement cannot be read); the driver's text where a value has no
    literal form."""
    compiled = getattr(context, "compiled", None)
    if compiled is None or compiled.statement is None:
        return statement
    try:
        return str(compiled.statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    except (sa.exc.SQLAlchemyError, NotImplementedError, TypeError, ValueError):
        return statement


def _first(page: Page, copied: bool) -> BuiltDocument | DocumentError | None:
    """The document of the page's one root row (a page holds its join children too); None when
    the table is empty."""
    if page.rows == 0:
        return None
    if copied:  # from an index: the page's key is a sort key, and there are no children
        return page.docs[0] if page.docs else page.failures[0]
    assert page.last_key is not None
    return _pick(document_id(page.last_key), page.docs, page.failures)


def _pick(
    doc_id: str, docs: list[BuiltDocument], failures: list[DocumentError]
) -> BuiltDocument | DocumentError | None:
    for doc in docs:
        if doc.id == doc_id:
            return doc
    for failure in failures:
        if failure.doc_id == doc_id:
            return failure
    return None


def _by_id(
    source: Source, plan: IndexPlan, builder: DocumentBuilder, doc_id: str
) -> BuiltDocument | DocumentError | str:
    """The document with id *doc_id*, built by key with the same builder (the same statement and
    encoding as a page, only selected by key); a join child is built with its parent, as pages
    build it. The id must be the row's own: under a case-insensitive collation ``ab`` finds the
    row ``AB``, whose document is another one. A row that exists but that a filter keeps out of
    the index gives the sentence saying which filter (:func:`_filtered_out`)."""
    if getattr(source, "engine", None) is None:
        raise UsageError(
            f"--id {doc_id!r}: documents of an index source cannot be looked up one by one; "
            "leave --id out to see the first document"
        )
    lookup = SourceLookup(source, plan)
    ref = lookup.child_of(doc_id) if plan.joins else None
    if ref is not None:
        parent = lookup.parents_of(ref.relation, [ref.key]).get(doc_id)  # through the relation's filter
        if parent is None and (hidden := _child_filtered_out(source, ref, doc_id)) is not None:
            return hidden
        keys = [] if parent is None else [parent]
    else:
        key = lookup.root_key(doc_id)
        keys = [] if key is None else [key]
    found: BuiltDocument | DocumentError | str | None = None
    if keys:
        docs, failures, missing = builder.by_keys(keys)
        found = _pick(doc_id, docs, failures)
        if found is None:
            found = _filtered_out(source, plan, doc_id, ref, keys[0], missing)
    if found is None:
        cols = ", ".join(plan.id_columns)
        raise UsageError(
            f"--id {doc_id!r}: index {plan.alias!r} has no such document (no row of table {plan.table.name!r} "
            f"has that id; ids are the values of {cols}"
            + (", composite parts joined by '|'" if len(plan.id_columns) > 1 else "")
            + ")"
        )
    return found


def _filtered_out(
    source: Source, plan: IndexPlan, doc_id: str, ref: ChildRef | None, root: Key, missing: list[str]
) -> str | None:
    """Why the row of *doc_id* makes no document although it exists, if a filter is why: the
    builder reads through the filters and reported its root key *root* missing, so the row is
    looked up by key in the table itself, with no filter; the id must be the row's own. For a
    join child (*ref*), *root* is its parent's key."""
    where = plan.config.where
    parent_id = document_id(root)
    if where is None or parent_id not in missing:
        return None
    rows = source.fetch_where_in(plan.table, plan.id_columns, [root], plan.id_columns, plan.id_columns)
    if not any(document_id(row) == parent_id for row in rows):
        return None
    if ref is None:
        return f"row {doc_id}: filtered out by `{where}`" + _tombstone(plan)
    return f"row {doc_id}: its parent row {parent_id} is filtered out by `{where}`"


def _child_filtered_out(source: Source, ref: ChildRef, doc_id: str) -> str | None:
    """Why the join child *doc_id* makes no document although its row exists, if its relation's
    filter is why (the row looked up by key in the relation's table itself)."""
    rel = ref.relation
    where = rel.shape.where
    if where is None:
        return None
    rows = source.fetch_where_in(rel.table, rel.id_columns, [ref.key], rel.id_columns, rel.id_columns)
    if not any(child_id(rel.name, tuple(row)) == doc_id for row in rows):
        return None
    return f"row {doc_id}: filtered out by `{where}` (the where of relation {rel.name!r})"


def _tombstone(plan: IndexPlan) -> str:
    if plan.config.deletes != "soft":
        return ""
    return "; with deletes: soft, a document it had before it left the filter stays as a tombstone"


def _build_path(
    path: str, reason: str, builder: DocumentBuilder, built: BuiltDocument | DocumentError | None
) -> BuildPath:
    """The builder's path, refined where the in-database builder decides per plan (whether the
    server writes the canonical JSON) and per document (values it cannot write canonically)."""
    name = type(builder).__name__
    if path != "in-database":
        return BuildPath(path, name, reason)
    writes_canonical = bool(getattr(builder, "writes_canonical", False))
    if not writes_canonical:
        why = getattr(builder, "decoding_reason", None) or "the plan's types do not allow it"
        return BuildPath(
            path,
            name,
            f"{reason}; PostgreSQL assembles each document (json_build_object, json_agg) and Python re-encodes "
            f"it canonically, because {why}",
        )
    document = None
    if isinstance(built, BuiltDocument):
        document = (
            "server-written JSON: the worker only hashes it"
            if built.fields is None
            else "decoded in Python: it holds a value PostgreSQL cannot write canonically "
            "(NaN, an infinity, or a float it writes with an exponent)"
        )
    return BuildPath(
        "server-written JSON",
        name,
        f"{reason}; every column type of the plan has a canonical text in PostgreSQL, so the server writes "
        "each document's canonical JSON itself",
        document,
    )
