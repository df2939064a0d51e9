"""Assembling documents inside PostgreSQL: one statement per page, JSON built by the server.

``json_build_object`` for each row and object relation, ``json_agg(... ORDER BY ...)`` for nested
ones, correlated per parent; the server hands over finished documents. The JSON is re-encoded
canonically (sorted keys, numbers normalised) so content hashes equal the Python builder's.
The version column (if any) comes beside the keys, as the database types it, so both builders
derive the same versions; join children, documents of their own, are built as the Python builder
builds them (one ``IN`` query per relation and page).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import aggregate_order_by

from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, Key, Page, Row
from sparkindex.documents.floats import restore_floats
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.errors import DocumentError
from sparkindex.keys import document_id
from sparkindex.sources.base import KeyRange, Source, coerce_key


class JsonAggregationBuilder(DocumentBuilder):
    def __init__(self, source: Source, plan: IndexPlan) -> None:
        super().__init__(source, plan)
        self._root = plan.table.table.alias("r0")
        self._keys = [self._root.c[k] for k in plan.id_columns]
        self._extra = [self._root.c[plan.version]] if plan.version else []

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

    def _select(self) -> sa.Select[Any]:
        """Rows of (id columns..., [version], document JSON)."""
        doc = sa.cast(self._object(self._root, self.plan.emit, self.plan.embedded), sa.Text).label("doc")
        return sa.select(*self._keys, *self._extra, doc)

    def statement(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int | None) -> sa.Select[Any]:
        plan = self.plan
        stmt = self._select()
        start = coerce_key(plan.table, plan.id_columns, after if after is not None else rng.after)
        upto = coerce_key(plan.table, plan.id_columns, rng.upto)
        if start is not None:
            stmt = stmt.where(Source._key_cond(self._keys, ">", start))
        if upto is not None:
            stmt = stmt.where(Source._key_cond(self._keys, "<=", upto))
        stmt = stmt.order_by(*self._keys)
        return stmt.limit(limit) if limit is not None else stmt

    def _documents(self, rows: Sequence[Row]) -> tuple[list[BuiltDocument], list[DocumentError]]:
        """Each row (id columns, [version], JSON text) as a canonical document or a failure naming
        its id; then the join children of the rows."""
        docs: list[BuiltDocument] = []
        failures: list[DocumentError] = []
        n = len(self._keys)
        for row in rows:
            doc_id = document_id(row[:n])
            try:
                body = orjson.loads(row[-1])
            except orjson.JSONDecodeError as exc:
                failures.append(DocumentError(doc_id, str(exc), "InvalidJSON"))
                continue
            restore_floats(body, self._floats)
            result = self.finish(row[:n], body, row[n] if self._extra else None)
            if isinstance(result, DocumentError):
                failures.append(result)
            else:
                docs.append(result)
        if self.plan.joins:
            self.join_children([tuple(r[:n]) for r in rows], docs, failures)
        return docs, failures

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        with self.source.connect(f"a page of documents from table {self.plan.table.name!r}") as conn:
            rows = conn.execute(self.statement(rng, after, limit)).fetchall()
        docs, failures = self._documents(rows)
        last = tuple(rows[-1][: len(self._keys)]) if rows else None
        return Page(docs, failures, len(rows), last, len(docs) + len(failures) - len(rows))

    def by_keys(self, keys: Sequence[Key]) -> tuple[list[BuiltDocument], list[DocumentError], list[str]]:
        wanted = self._coerced(keys)
        n = len(self._keys)
        per = max(1, self.source.max_in_params // n)
        rows: list[Row] = []
        with self.source.connect(f"documents of table {self.plan.table.name!r} by key") as conn:
            for i in range(0, len(wanted), per):
                chunk = wanted[i : i + per]
                cond = self._keys[0].in_([k[0] for k in chunk]) if n == 1 else sa.tuple_(*self._keys).in_(chunk)
                rows.extend(conn.execute(self._select().where(cond).order_by(*self._keys)).fetchall())
        docs, failures = self._documents(rows)
        return docs, failures, self._missing(wanted, [tuple(r[:n]) for r in rows])
