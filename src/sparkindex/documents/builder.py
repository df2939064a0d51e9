"""Building documents for one page of root rows, or for a list of root keys.

Children are fetched once per page and per relation with batched ``IN`` lists, never per row, and
relations nest to any depth (reviews -> author). Every root row read comes back either as a
document or as a :class:`DocumentError` naming its id: a row that cannot be built is reported,
never dropped. So does every row of a join relation, which is a document of its own
(:mod:`sparkindex.documents.join`).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

from sparkindex.checksums import RangeChecksum, document_check
from sparkindex.documents.built import BuiltDocument, Key, Page, Row
from sparkindex.documents.fetch_order import grouped_order
from sparkindex.documents.floats import (
    NO_FLOATS,
    FloatPaths,
    finite_columns,
    finite_level,
    float_columns,
    float_paths,
    non_finite_path,
)
from sparkindex.documents.hashing import content_hash, dumps_document, shape_key
from sparkindex.documents.join import child_id, child_sort_key, join_value, parent_prefixes, routing_of
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.documents.transforming import TransformCache, make_transform, transform_page
from sparkindex.documents.versions import external_version
from sparkindex.errors import ConfigError, DocumentError
from sparkindex.keys import document_id, sort_key
from sparkindex.sources.base import KeyRange, Source, coerce_key


class DocumentBuilder:
    """Builds documents in Python: one query per page plus one per relation (batched IN)."""

    def __init__(self, source: Source, plan: IndexPlan, transform_cache: TransformCache | None = None) -> None:
        """*transform_cache*: where the index's transform keeps what it computed per document
        (the coordination store's), so that an ``on_change`` transform runs only for documents
        whose inputs changed; without one it runs for every document."""
        self.source = source
        self.plan = plan
        self.read_columns = plan.read
        #: the index's per-document transform (:mod:`.transform`), loaded where it first runs
        self.transform = make_transform(plan, transform_cache)
        #: keys the content hash with what shapes documents beyond their bytes (:func:`shape_key`)
        self._hash_key = shape_key(plan)
        pos = {c: i for i, c in enumerate(self.read_columns)}
        self._id_pos = [pos[c] for c in plan.id_columns]
        key = itemgetter(*self._id_pos)  # a value for one column, a tuple for more
        self._key_of: Any = (lambda row: (key(row),)) if len(self._id_pos) == 1 else key
        self._pos = pos
        self._version_pos = pos[plan.version] if plan.version else None
        self._routing_pos = pos[plan.routing] if plan.routing else None
        self._floats = float_paths(plan.rows, plan.emit, plan.embedded)
        self._float_pos = [pos[c] for c in float_columns(plan.rows, plan.emit)]
        self._child_floats: dict[str, FloatPaths] = {
            r.name: float_paths(r.rows, r.emit, r.children) for r in plan.joins
        }
        self._child_prefixes = parent_prefixes(plan.joins)
        #: no version column, no join field, no join children, no routing and an unkeyed hash: a
        #: root row's only check is its encoding, and the id needs no test against the
        #: children's (the usual index)
        self._plain_root = (
            plan.version is None
            and plan.join_field is None
            and not self._child_prefixes
            and plan.routing is None
            and not self._hash_key
        )

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return self._key_of(row)  # type: ignore[no-any-return]

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        plan = self.plan
        rows = self.source.read_page(plan.rows, plan.id_columns, self.read_columns, rng, after, limit)
        docs, failures = self.build(rows)
        children = len(docs) + len(failures) - len(rows)
        return Page(docs, failures, len(rows), self.key_of(rows[-1]) if rows else None, children)

    def database_checksum(self, rng: KeyRange) -> RangeChecksum | None:
        """Optional: the range's checksum (:mod:`sparkindex.checksums`) computed by the database
        itself, without building a document here; None (the default) where it cannot, and the
        caller builds the range's documents and sums their checks."""
        return None

    def database_checks(self, rng: KeyRange) -> list[tuple[Key, int | None]] | None:
        """Optional: each row of the range as its key and its document's check, computed by the
        database itself; None (the default) where it cannot."""
        return None

    def by_keys(self, keys: Sequence[Key]) -> tuple[list[BuiltDocument], list[DocumentError], list[str]]:
        """The documents of the root rows with these id keys (change capture rebuilds by key).

        Returns the built documents, the rows that failed to build, and the ids of the keys no
        row has any more (deleted rows: their documents should be deleted). Keys may come from
        storage (:func:`sparkindex.keys.load_key`); they are coerced to the columns' types.
        """
        wanted = self._coerced(keys)
        plan = self.plan
        rows = self.source.fetch_where_in(plan.rows, plan.id_columns, wanted, self.read_columns, plan.id_columns)
        docs, failures = self.build(rows)
        return docs, failures, self._missing(wanted, [self.key_of(r) for r in rows])

    def _coerced(self, keys: Sequence[Key]) -> list[Key]:
        plan = self.plan
        out: list[Key] = []
        for key in keys:
            coerced = coerce_key(plan.table, plan.id_columns, tuple(key))
            assert coerced is not None
            out.append(coerced)
        return list(dict.fromkeys(out))

    @staticmethod
    def _missing(wanted: Sequence[Key], found: Sequence[Key]) -> list[str]:
        present = {document_id(k) for k in found}
        return [doc_id for doc_id in (document_id(k) for k in wanted) if doc_id not in present]

    def build(self, rows: Sequence[Row]) -> tuple[list[BuiltDocument], list[DocumentError]]:
        """Documents for *rows* (in order), then their join children, and the per-document
        failures: one or the other per row."""
        docs = _dicts(self.plan.emit, rows)
        finite = self._attach(self.plan.embedded, rows, self._pos, docs)
        floats = NO_FLOATS if finite and finite_columns(rows, self._float_pos) else self._floats
        built: list[BuiltDocument] = []
        errors: list[DocumentError] = []
        vpos = self._version_pos
        for row, doc in zip(rows, self.transformed([document_id(self.key_of(r)) for r in rows], docs), strict=True):
            if isinstance(doc, DocumentError):
                errors.append(doc)
                continue
            version = None if vpos is None else row[vpos]
            result = self._finish(self.key_of(row), doc, version, floats, self._routing(row))
            if isinstance(result, DocumentError):
                errors.append(result)
            else:
                built.append(result)
        if self.plan.joins:
            self.join_children([self.key_of(r) for r in rows], built, errors)
        return built, errors

    def transformed(
        self, ids: Sequence[str], docs: list[dict[str, Any]], decoded: bool = False
    ) -> Sequence[dict[str, Any] | DocumentError]:
        """The root documents after the index's transform (*docs* themselves without one): a
        document whose transform raised is a :class:`DocumentError` in its place.

        The transform sees JSON values whichever builder made the document (*decoded*: already
        decoded from JSON): strings for dates and times, numbers for decimals, as the index will
        hold them, so one function behaves alike under ``build: python`` and ``build: database``.
        """
        if self.transform is None or not docs:
            return docs
        return transform_page(self.transform, self._floats, ids, docs, decoded)

    def _routing(self, row: Row) -> str | None:
        """The routing value of a root row (its routing column's text; None when NULL)."""
        if self._routing_pos is None:
            return None
        value = row[self._routing_pos]
        return None if value is None else str(value)

    def finish(
        self, key: Sequence[Any], doc: dict[str, Any], version: Any = None, routing: str | None = None
    ) -> BuiltDocument | DocumentError:
        """The canonical document of the root row with *key* (and *version*, the value of the
        index's version column; *routing*, its routing value), or why it cannot be indexed as the
        source holds it."""
        return self._finish(key, doc, version, self._floats, routing)

    def _finish(
        self, key: Sequence[Any], doc: dict[str, Any], version: Any, floats: FloatPaths, routing: str | None = None
    ) -> BuiltDocument | DocumentError:
        if self._plain_root:
            return self._encoded(document_id(key), doc, floats, sort_key(key), None)
        checked = self._root_checks(key, version)
        if isinstance(checked, DocumentError):
            return checked
        doc_id, number = checked
        if self.plan.join_field is not None:
            doc[self.plan.join_field] = self.plan.join_parent
        return self._encoded(doc_id, doc, floats, sort_key(key), number, routing)

    def finish_canonical(
        self, key: Sequence[Any], canonical: bytes, version: Any = None, routing: str | None = None
    ) -> BuiltDocument | DocumentError:
        """:meth:`finish` for a document whose canonical JSON the source wrote itself (see
        :mod:`sparkindex.documents.canonical_sql`; never for a plan with a join field or a transform)."""
        checked = self._root_checks(key, version)
        if isinstance(checked, DocumentError):
            return checked
        doc_id, number = checked
        key_ = self._hash_key
        return BuiltDocument(
            doc_id,
            canonical,
            content_hash(canonical, key_),
            None,
            sort_key(key),
            number,
            routing,
            document_check(doc_id, canonical, key_),
        )

    def _root_checks(self, key: Sequence[Any], version: Any) -> tuple[str, int | None] | DocumentError:
        """The root row's document id and external version, or why it cannot be indexed."""
        doc_id = document_id(key)
        if self._child_prefixes and doc_id.startswith(self._child_prefixes):
            return DocumentError(
                doc_id,
                f"the id begins like the ids of this index's join children ({', '.join(self._child_prefixes)}); "
                "it would share their id space",
                "IdCollision",
            )
        if self.plan.version is None:
            return doc_id, None
        checked = external_version(doc_id, self.plan.version, version)
        if isinstance(checked, DocumentError):
            return checked
        return doc_id, checked

    def _encoded(
        self,
        doc_id: str,
        doc: dict[str, Any],
        floats: FloatPaths,
        key: str,
        version: int | None,
        routing: str | None = None,
    ) -> BuiltDocument | DocumentError:
        bad = None if floats is NO_FLOATS else non_finite_path(doc, floats)
        if bad is not None:
            return DocumentError(doc_id, f"field {bad!r} is NaN or infinite, which JSON cannot carry", "NonFinite")
        try:
            canonical = dumps_document(doc)
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError (also: integers over 64 bits)
            return DocumentError(doc_id, str(exc), "UnserializableValue")
        hash_key = self._hash_key
        return BuiltDocument(
            doc_id,
            canonical,
            content_hash(canonical, hash_key),
            doc,
            key,
            version,
            routing,
            document_check(doc_id, canonical, hash_key),
        )

    def join_children(
        self, parent_keys: Sequence[Key], built: list[BuiltDocument], errors: list[DocumentError]
    ) -> None:
        """Append the documents (or failures) of every join child of the parents with *parent_keys*
        (their id values): one ``IN`` query per relation and page, like nested relations."""
        parents = {k: k for k in parent_keys if None not in k}  # the parent's own values and types
        for rel in self.plan.joins:
            read = rel.read
            rows = self.source.fetch_where_in(rel.rows, rel.remote_key, list(parents), read, rel.order_by)
            pos = {c: i for i, c in enumerate(read)}
            bodies = _dicts(rel.emit, rows)
            finite = self._attach(rel.children, rows, pos, bodies)
            finite = finite and finite_level(rows, rel.rows, rel.emit, pos)
            rpos = [pos[c] for c in rel.remote_key]
            kpos = [pos[c] for c in rel.id_columns]
            vpos = pos[rel.version] if rel.version else None
            floats = NO_FLOATS if finite else (frozenset(), {rel.name: self._child_floats[rel.name]})
            for row, body in zip(rows, bodies, strict=True):
                result = self._child(rel, row, body, parents, rpos, kpos, vpos, floats)
                if isinstance(result, DocumentError):
                    errors.append(result)
                else:
                    built.append(result)

    def _child(
        self,
        rel: RelationPlan,
        row: Row,
        body: dict[str, Any],
        parents: dict[Key, Key],
        rpos: list[int],
        kpos: list[int],
        vpos: int | None,
        floats: FloatPaths,
    ) -> BuiltDocument | DocumentError:
        ref = tuple(row[i] for i in rpos)
        parent_key = parents.get(ref, ref)
        key = tuple(row[i] for i in kpos)
        doc_id = child_id(rel.name, key)
        version = None
        if rel.version is not None:
            checked = external_version(doc_id, rel.version, row[vpos] if vpos is not None else None)
            if isinstance(checked, DocumentError):
                return checked
            version = checked
        parent_id = routing_of(parent_key)
        assert self.plan.join_field is not None  # set whenever the plan has joins
        doc = {rel.name: body, self.plan.join_field: join_value(rel, parent_id)}
        return self._encoded(doc_id, doc, floats, child_sort_key(parent_key, rel.name, key), version, parent_id)

    def _attach(
        self,
        relations: Sequence[RelationPlan],
        parent_rows: Sequence[Row],
        parent_pos: dict[str, int],
        parent_docs: list[dict[str, Any]],
    ) -> bool:
        """Attach each relation's documents to its parents'; whether every float value read on the
        way is known finite (:func:`~sparkindex.documents.floats.finite_columns`)."""
        finite = True
        for rel in relations:
            # one key column (the usual case): the values themselves, not 1-tuples, are matched
            parent_key = itemgetter(*(parent_pos[c] for c in rel.local_key))
            keys = list(map(parent_key, parent_rows))
            single = len(rel.local_key) == 1
            wanted = [(k,) for k in keys if k is not None] if single else [k for k in keys if None not in k]
            read = rel.read
            rows = self.source.fetch_where_in(rel.rows, rel.remote_key, wanted, read, grouped_order(rel))
            pos = {c: i for i, c in enumerate(read)}
            child_docs = _dicts(rel.emit, rows)
            if rel.children:
                finite = self._attach(rel.children, rows, pos, child_docs) and finite
            finite = finite and finite_level(rows, rel.rows, rel.emit, pos)
            child_key = itemgetter(*(pos[c] for c in rel.remote_key))
            if rel.kind == "object":
                one: dict[Any, dict[str, Any]] = {}
                for row, child in zip(rows, child_docs, strict=True):
                    one.setdefault(child_key(row), child)
                for key, doc in zip(keys, parent_docs, strict=True):
                    doc[rel.name] = one.get(key)
            else:
                many: dict[Any, list[dict[str, Any]]] = {}
                for row, child in zip(rows, child_docs, strict=True):
                    many.setdefault(child_key(row), []).append(child)
                for key, doc in zip(keys, parent_docs, strict=True):
                    doc[rel.name] = many.get(key, [])
        return finite


def _dicts(emit: Sequence[str], rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The emitted columns of each row as a dict. A plan reads its emitted columns first, in
    order (:attr:`RelationPlan.read <sparkindex.documents.plan.RelationPlan.read>`), so zip
    stops where they end."""
    return [dict(zip(emit, row)) for row in rows]  # noqa: B905 - the rows are longer on purpose


#: Builders that assemble whole documents in SQL, by SQLAlchemy dialect name: (module, class,
#: whether ``build: auto`` prefers it). Kept here, not on the source, so that ``sources`` never
#: imports ``documents``. PostgreSQL: `make bench` (build_postgres, 200k shop products with
#: reviews and authors) built 10.3k docs/s with JSON aggregation, 4.2k docs/s in Python.
DATABASE_BUILDERS: dict[str, tuple[str, str, bool]] = {
    "postgresql": ("sparkindex.documents.in_database", "JsonAggregationBuilder", True),
    # an index as the source (index-to-index rebuilds): its documents are copied, not built
    "sparkindex-index": ("sparkindex.documents.from_index", "IndexDocumentBuilder", True),
}


@dataclass(frozen=True)
class BuilderChoice:
    """Which builder a plan gets and why, in words (``sparkindex explain`` shows both)."""

    cls: type[DocumentBuilder]
    #: "python", "in-database" or "copied" (documents read from another index)
    path: str
    reason: str


def choose_builder(source: Source, plan: IndexPlan) -> BuilderChoice:
    """The builder for *plan*: in the database where the dialect can and measurement said it pays."""
    mode = plan.config.build
    if mode == "python":
        return BuilderChoice(DocumentBuilder, "python", f"index {plan.alias!r} says build: python")
    entry = DATABASE_BUILDERS.get(source.dialect_name)
    if entry is None:
        if mode == "database":
            raise ConfigError(
                f"index {plan.alias!r}: build: database is not available for {type(source).__name__}; "
                "use build: python or auto"
            )
        return BuilderChoice(
            DocumentBuilder,
            "python",
            f"build: auto, and no builder assembles documents inside {source.dialect_name} "
            f"(only {', '.join(d for d in DATABASE_BUILDERS if d != 'sparkindex-index')} has one)",
        )
    module, name, preferred = entry
    if mode == "database" or preferred:
        cls = cast(type[DocumentBuilder], getattr(importlib.import_module(module), name))
        if source.dialect_name == "sparkindex-index":
            return BuilderChoice(cls, "copied", "the source is an index: its documents are copied, not built")
        why = (
            "says build: database"
            if mode == "database"
            else f"says build: auto, which prefers the database on {source.dialect_name} (faster in make bench)"
        )
        return BuilderChoice(cls, "in-database", f"index {plan.alias!r} {why}")
    return BuilderChoice(
        DocumentBuilder, "python", f"build: auto, and Python measured faster than {source.dialect_name} at assembling"
    )


def make_builder(source: Source, plan: IndexPlan, transform_cache: TransformCache | None = None) -> DocumentBuilder:
    """The builder :func:`choose_builder` picks for *plan* (*transform_cache*: see
    :class:`DocumentBuilder`)."""
    return choose_builder(source, plan).cls(source, plan, transform_cache)


__all__ = [
    "DATABASE_BUILDERS",
    "BuilderChoice",
    "BuiltDocument",
    "DocumentBuilder",
    "Key",
    "Page",
    "Row",
    "choose_builder",
    "document_id",
    "make_builder",
]
