"""Building documents for one page of root rows.

Children are fetched once per page and per relation with batched ``IN`` lists, never per row, and
relations nest to any depth (reviews -> author).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.errors import ConfigError, DocumentError
from sparkindex.sources.base import KeyRange, Source

Row = tuple[Any, ...]


@dataclass(frozen=True)
class BuiltDocument:
    id: str
    source: bytes  # canonical JSON
    hash: str


def document_id(values: Sequence[Any]) -> str:
    """Primary keys become ids: retries overwrite, never duplicate. Composite keys join with '|'."""
    return "|".join("" if v is None else str(v) for v in values)


@dataclass(frozen=True)
class Page:
    """One keyset page: its documents, its per-document failures, and where the next page starts."""

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

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[i] for i in self._id_pos)

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        plan = self.plan
        rows = self.source.read_page(plan.table, plan.id_columns, self.read_columns, rng, after, limit)
        docs, failures = self.build(rows)
        return Page(docs, failures, len(rows), self.key_of(rows[-1]) if rows else None)

    def build(self, rows: Sequence[Row]) -> tuple[list[BuiltDocument], list[DocumentError]]:
        """Documents for *rows* (in order) and the per-document failures."""
        docs = [{c: row[i] for c, i in self._emit_pos} for row in rows]
        self._attach(self.plan.relations, rows, self._pos, docs)
        built: list[BuiltDocument] = []
        errors: list[DocumentError] = []
        for row, doc in zip(rows, docs, strict=True):
            doc_id = document_id(self.key_of(row))
            try:
                canonical = dumps_document(doc)
            except TypeError as exc:
                errors.append(DocumentError(doc_id, str(exc), "UnserializableValue"))
                continue
            built.append(BuiltDocument(doc_id, canonical, content_hash(canonical)))
        return built, errors

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


def make_builder(source: Source, plan: IndexPlan) -> DocumentBuilder:
    """The builder for *plan*: in the database where the dialect can and measurement said it pays."""
    mode = plan.config.build
    if mode == "python":
        return DocumentBuilder(source, plan)
    in_db = source.database_builder(plan)
    if in_db is None:
        if mode == "database":
            raise ConfigError(
                f"index {plan.alias!r}: build: database is not available for {type(source).__name__}; "
                "use build: python or auto"
            )
        return DocumentBuilder(source, plan)
    if mode == "database" or source.prefer_database_build:
        return in_db
    return DocumentBuilder(source, plan)
