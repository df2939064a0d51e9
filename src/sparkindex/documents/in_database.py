"""Assembling documents inside PostgreSQL: one statement per page, JSON built by the server.

``json_build_object`` for each row and object relation, ``json_agg(... ORDER BY ...)`` for nested
ones, correlated per parent; the server hands over finished documents. The JSON is re-encoded
canonically (sorted keys, numbers normalised) so content hashes equal the Python builder's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import aggregate_order_by

from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, Page, document_id
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.plan import RelationPlan
from sparkindex.errors import DocumentError
from sparkindex.sources.base import KeyRange, Source, coerce_key

FloatPaths = tuple[frozenset[str], dict[str, "FloatPaths"]]


def _float_paths(table: Any, emit: Sequence[str], relations: Sequence[RelationPlan]) -> FloatPaths:
    """Where the SQL has floating-point columns: PostgreSQL writes 214.0 as 214 in JSON, Python as 214.0."""
    floats = frozenset(c for c in emit if isinstance(table.columns[c].type, sa.Float | sa.Numeric))
    return floats, {r.name: _float_paths(r.table, r.emit, r.children) for r in relations}


def _restore_floats(doc: dict[str, Any], paths: FloatPaths) -> None:
    floats, children = paths
    for name in floats:
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            doc[name] = float(value)
    for name, sub in children.items():
        value = doc.get(name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                _restore_floats(item, sub)


class JsonAggregationBuilder(DocumentBuilder):
    def __init__(self, source: Source, plan: Any) -> None:
        super().__init__(source, plan)
        self._floats = _float_paths(plan.table, plan.emit, plan.relations)

    def _object(self, table: Any, emit: Sequence[str], relations: Sequence[RelationPlan]) -> Any:
        args: list[Any] = []
        for col in emit:
            args += [sa.literal(col), table.c[col]]
        for rel in relations:
            child = rel.table.table.alias()
            cond = sa.and_(*[child.c[r] == table.c[lc] for lc, r in zip(rel.local_key, rel.remote_key, strict=True)])
            obj = self._object(child, rel.emit, rel.children)
            order = [child.c[c] for c in rel.order_by]
            if rel.kind == "object":
                sub: Any = sa.select(obj).where(cond).order_by(*order).limit(1).scalar_subquery()
            else:
                agg = sa.func.json_agg(aggregate_order_by(obj, *order))
                sub = sa.func.coalesce(sa.select(agg).where(cond).scalar_subquery(), sa.literal_column("'[]'::json"))
            args += [sa.literal(rel.name), sub]
        return sa.func.json_build_object(*args)

    def statement(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int | None) -> sa.Select[Any]:
        plan = self.plan
        root = plan.table.table.alias("r0")
        keys = [root.c[k] for k in plan.id_columns]
        doc = sa.cast(self._object(root, plan.emit, plan.relations), sa.Text).label("doc")
        stmt = sa.select(*keys, doc)
        start = coerce_key(plan.table, plan.id_columns, after if after is not None else rng.after)
        upto = coerce_key(plan.table, plan.id_columns, rng.upto)
        if start is not None:
            stmt = stmt.where(Source._key_cond(keys, ">", start))
        if upto is not None:
            stmt = stmt.where(Source._key_cond(keys, "<=", upto))
        stmt = stmt.order_by(*keys)
        return stmt.limit(limit) if limit is not None else stmt

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        with self.source.engine.connect() as conn:
            rows = conn.execute(self.statement(rng, after, limit)).fetchall()
        docs: list[BuiltDocument] = []
        failures: list[DocumentError] = []
        n = len(self.plan.id_columns)
        for row in rows:
            doc_id = document_id(row[:n])
            try:
                body = orjson.loads(row[n])
                _restore_floats(body, self._floats)
                canonical = dumps_document(body)
            except orjson.JSONDecodeError as exc:
                failures.append(DocumentError(doc_id, str(exc), "InvalidJSON"))
                continue
            docs.append(BuiltDocument(doc_id, canonical, content_hash(canonical)))
        return Page(docs, failures, len(rows), tuple(rows[-1][:n]) if rows else None)
