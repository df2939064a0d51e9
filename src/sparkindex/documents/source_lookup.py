"""From document ids back to source rows: which ids the source would still build, and their keys.

Verify's index-side pass and the dead-letter re-drive start from ids the index or the store
holds, not from rows. A document id is the key's text (:func:`sparkindex.keys.document_id`), so
each part is parsed back into the column's Python type and the rows are fetched by key with the
source's batched ``IN``. The answer is decided by comparing ids, never by trusting the lookup:
under a case- or accent-insensitive collation ``ab`` finds the row ``AB``, and ``1.50`` finds
``1.5``; the row counts as present only if its own document id is the one asked for. An id that
cannot be parsed for the column types (text in an integer key, bad base64) names no row.

Join children (``<relation>:<key>``) exist when their row exists *and* their parent row does,
because the builder makes children only for parents it reads.
"""

from __future__ import annotations

import base64
import decimal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sparkindex.documents.join import child_id
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.keys import document_id, split_document_id
from sparkindex.sources.base import Source, TableInfo, coerce_key

Key = tuple[Any, ...]

_BINARY = (sa.LargeBinary, sa.BINARY, sa.VARBINARY)
_BOOLEANS = {"True": True, "False": False, "1": True, "0": False, "true": True, "false": False}


def _parse_part(col_type: sa.types.TypeEngine[Any], text: str | None) -> Any:
    """One key part, from its text in a document id back to what the driver returns for it."""
    if text is None:
        return None
    if isinstance(col_type, sa.Boolean):
        if text not in _BOOLEANS:
            raise ValueError(f"not a boolean: {text!r}")
        return _BOOLEANS[text]
    if isinstance(col_type, sa.Integer):
        value = int(text)
        if not -(2**63) <= value < 2**63:  # no row can hold it; binding it would fail the whole batch
            raise ValueError(f"integer out of range: {text!r}")
        return value
    if isinstance(col_type, sa.Float):
        return float(text)
    if isinstance(col_type, sa.Numeric):
        return decimal.Decimal(text)
    if isinstance(col_type, _BINARY):
        return base64.b64decode(text, validate=True)
    return text  # text, and what coerce_key restores from text (UUID, dates, times)


def parse_key(info: TableInfo, columns: Sequence[str], doc_id: str) -> Key | None:
    """The key of the row whose document id would be *doc_id*, or None when no row's could be."""
    try:
        parts = split_document_id(doc_id, len(columns))
        raw = tuple(_parse_part(info.columns[c].type, p) for c, p in zip(columns, parts, strict=True))
        return coerce_key(info, columns, raw)
    except (ValueError, ArithmeticError, TypeError):
        return None


@dataclass(frozen=True)
class ChildRef:
    """A join child's id, split: its relation and its own key."""

    relation: RelationPlan
    key: Key


class SourceLookup:
    """Existence of documents by id for one index plan; one per process and plan."""

    def __init__(self, source: Source, plan: IndexPlan) -> None:
        self.source = source
        self.plan = plan
        self._joins = {f"{r.name}:": r for r in plan.joins}

    def child_of(self, doc_id: str) -> ChildRef | None:
        """The join relation and key *doc_id* names, if it is a child's id."""
        for prefix, rel in self._joins.items():
            if doc_id.startswith(prefix):
                key = parse_key(rel.table, rel.id_columns, doc_id[len(prefix) :])
                return None if key is None else ChildRef(rel, key)
        return None

    def root_key(self, doc_id: str) -> Key | None:
        return parse_key(self.plan.table, self.plan.id_columns, doc_id)

    def existing_roots(self, keys: Iterable[Key]) -> set[str]:
        """Document ids of the root rows with these keys that exist (by their own id)."""
        plan = self.plan
        rows = self.source.fetch_where_in(plan.rows, plan.id_columns, list(keys), plan.id_columns, plan.id_columns)
        return {document_id(r) for r in rows}

    def existing(self, ids: Sequence[str]) -> set[str]:
        """The subset of *ids* that the source would build documents for today."""
        wanted = set(ids)
        roots: list[Key] = []
        children: dict[str, tuple[RelationPlan, list[Key]]] = {}
        for doc_id in wanted:
            if self._joins and doc_id.startswith(tuple(self._joins)):
                ref = self.child_of(doc_id)
                if ref is not None:
                    children.setdefault(ref.relation.name, (ref.relation, []))[1].append(ref.key)
                continue
            key = self.root_key(doc_id)
            if key is not None:
                roots.append(key)
        present = self.existing_roots(roots) & wanted
        for rel, keys in children.values():
            present |= self._existing_children(rel, keys) & wanted
        return present

    def parents_of(self, rel: RelationPlan, keys: Sequence[Key]) -> dict[str, Key]:
        """Child document id -> its parent's key, for the child rows with *keys* that exist."""
        cols = list(dict.fromkeys([*rel.id_columns, *rel.remote_key]))
        rows = self.source.fetch_where_in(rel.rows, rel.id_columns, list(keys), cols, rel.id_columns)
        pos = {c: i for i, c in enumerate(cols)}
        out: dict[str, Key] = {}
        for row in rows:
            parent = tuple(row[pos[c]] for c in rel.remote_key)
            if None not in parent:
                out[child_id(rel.name, tuple(row[pos[c]] for c in rel.id_columns))] = parent
        return out

    def _existing_children(self, rel: RelationPlan, keys: Sequence[Key]) -> set[str]:
        parents = self.parents_of(rel, keys)
        alive = self.existing_roots(parents.values())
        return {cid for cid, parent in parents.items() if document_id(parent) in alive}


__all__ = ["ChildRef", "SourceLookup", "parse_key"]
