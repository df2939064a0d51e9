"""Building documents for one page of root rows, or for a list of root keys.

Children are fetched once per page and per relation with batched ``IN`` lists, never per row, and
relations nest to any depth (reviews -> author). Every root row read comes back either as a
document or as a :class:`DocumentError` naming its id: a row that cannot be built is reported,
never dropped.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sparkindex.documents.floats import float_paths, non_finite_path
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.errors import ConfigError, DocumentError
from sparkindex.keys import document_id, sort_key
from sparkindex.sources.base import KeyRange, Source, coerce_key

Row = tuple[Any, ...]
Key = tuple[Any, ...]


@dataclass(frozen=True)
class BuiltDocument:
    id: str
    source: bytes  # canonical JSON
    hash: str
    #: the same document as the dict it was encoded from, for a target that needs its own
    #: encoding (Tantivy), so that it never decodes ``source`` again
    fields: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: :func:`sparkindex.keys.sort_key` of the root row's key
    sort_key: str | None = None


@dataclass(frozen=True)
class Page:
    """One keyset page: its documents, its per-document failures, and where the next page starts.

    ``len(docs) + len(failures) == rows``: every row read is accounted for.
    """

    docs: list[BuiltDocument]
    failures: list[DocumentError]
    rows: int
    last_key: tuple[Any, ...] | None


class DocumentBuilder:
    """Builds documents in Python: one query per page plus one per relation (batched IN)."""

    def __init__(self, source: Source, plan: IndexPlan) -> None:
        self.source = source
        self.plan = plan
        self.read_columns = plan.read
        pos = {c: i for i, c in enumerate(self.read_columns)}
        self._id_pos = [pos[c] for c in plan.id_columns]
        self._emit_pos = [(c, pos[c]) for c in plan.emit]
        self._pos = pos
        self._floats = float_paths(plan.table, plan.emit, plan.relations)

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[i] for i in self._id_pos)

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        plan = self.plan
        rows = self.source.read_page(plan.table, plan.id_columns, self.read_columns, rng, after, limit)
        docs, failures = self.build(rows)
        return Page(docs, failures, len(rows), self.key_of(rows[-1]) if rows else None)

    def by_keys(self, keys: Sequence[Key]) -> tuple[list[BuiltDocument], list[DocumentError], list[str]]:
        """The documents of the root rows with these id keys (change capture rebuilds by key).

        Returns the built documents, the rows that failed to build, and the ids of the keys no
        row has any more (deleted rows: their documents should be deleted). Keys may come from
        storage (:func:`sparkindex.keys.load_key`); they are coerced to the columns' types.
        """
        wanted = self._coerced(keys)
        plan = self.plan
        rows = self.source.fetch_where_in(plan.table, plan.id_columns, wanted, self.read_columns, plan.id_columns)
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
        """Documents for *rows* (in order) and the per-document failures, one or the other per row."""
        docs = [{c: row[i] for c, i in self._emit_pos} for row in rows]
        self._attach(self.plan.relations, rows, self._pos, docs)
        built: list[BuiltDocument] = []
        errors: list[DocumentError] = []
        for row, doc in zip(rows, docs, strict=True):
            result = self.finish(self.key_of(row), doc)
            if isinstance(result, DocumentError):
                errors.append(result)
            else:
                built.append(result)
        return built, errors

    def finish(self, key: Sequence[Any], doc: dict[str, Any]) -> BuiltDocument | DocumentError:
        """The canonical document of the root row with *key*, or why it cannot be indexed as the
        source holds it."""
        doc_id = document_id(key)
        bad = non_finite_path(doc, self._floats)
        if bad is not None:
            return DocumentError(doc_id, f"field {bad!r} is NaN or infinite, which JSON cannot carry", "NonFinite")
        try:
            canonical = dumps_document(doc)
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError (also: integers over 64 bits)
            return DocumentError(doc_id, str(exc), "UnserializableValue")
        return BuiltDocument(doc_id, canonical, content_hash(canonical), doc, sort_key(key))

    def _attach(
        self,
        relations: Sequence[RelationPlan],
        parent_rows: Sequence[Row],
        parent_pos: dict[str, int],
        parent_docs: list[dict[str, Any]],
    ) -> None:
        for rel in relations:
            lpos = [parent_pos[c] for c in rel.local_key]
            keys = [tuple(r[i] for i in lpos) for r in parent_rows]
            wanted = [k for k in keys if None not in k]
            read = rel.read
            rows = self.source.fetch_where_in(rel.table, rel.remote_key, wanted, read, rel.order_by)
            pos = {c: i for i, c in enumerate(read)}
            emit = [(c, pos[c]) for c in rel.emit]
            child_docs = [{c: row[i] for c, i in emit} for row in rows]
            if rel.children:
                self._attach(rel.children, rows, pos, child_docs)
            rpos = [pos[c] for c in rel.remote_key]
            if rel.kind == "object":
                one: dict[tuple[Any, ...], dict[str, Any]] = {}
                for row, child in zip(rows, child_docs, strict=True):
                    one.setdefault(tuple(row[i] for i in rpos), child)
                for key, doc in zip(keys, parent_docs, strict=True):
                    doc[rel.name] = one.get(key)
            else:
                many: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
                for row, child in zip(rows, child_docs, strict=True):
                    many.setdefault(tuple(row[i] for i in rpos), []).append(child)
                for key, doc in zip(keys, parent_docs, strict=True):
                    doc[rel.name] = many.get(key, [])


#: Builders that assemble whole documents in SQL, by SQLAlchemy dialect name: (module, class,
#: whether ``build: auto`` prefers it). Kept here, not on the source, so that ``sources`` never
#: imports ``documents``. PostgreSQL: `make bench` (build_postgres, 200k shop products with
#: reviews and authors) built 10.3k docs/s with JSON aggregation, 4.2k docs/s in Python.
DATABASE_BUILDERS: dict[str, tuple[str, str, bool]] = {
    "postgresql": ("sparkindex.documents.in_database", "JsonAggregationBuilder", True),
}


def make_builder(source: Source, plan: IndexPlan) -> DocumentBuilder:
    """The builder for *plan*: in the database where the dialect can and measurement said it pays."""
    mode = plan.config.build
    if mode == "python":
        return DocumentBuilder(source, plan)
    entry = DATABASE_BUILDERS.get(source.dialect_name)
    if entry is None:
        if mode == "database":
            raise ConfigError(
                f"index {plan.alias!r}: build: database is not available for {type(source).__name__}; "
                "use build: python or auto"
            )
        return DocumentBuilder(source, plan)
    module, name, preferred = entry
    if mode == "database" or preferred:
        cls = cast(type[DocumentBuilder], getattr(importlib.import_module(module), name))
        return cls(source, plan)
    return DocumentBuilder(source, plan)


__all__ = ["DATABASE_BUILDERS", "BuiltDocument", "DocumentBuilder", "Page", "document_id", "make_builder"]
