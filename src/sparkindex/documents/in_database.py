"""Assembling documents inside PostgreSQL: one statement per page, JSON built by the server.

Where the plan's column types allow, the server writes each document's canonical JSON itself
(:mod:`sparkindex.documents.canonical_sql`): the worker only hashes the bytes. Otherwise
``json_build_object`` for each row and object relation, ``json_agg(... ORDER BY ...)`` for nested
ones, correlated per parent, and the JSON is re-encoded canonically (sorted keys, numbers
normalised) so content hashes equal the Python builder's. The version column (if any) comes
beside the keys, as the database types it, so both builders derive the same versions; join
children, documents of their own, are built as the Python builder builds them (one ``IN`` query
per relation and page).

Either way the document arrives as the server's bytes, never as a Python string: the page's
cursor loads the document column with :class:`RawDocumentLoader`. Decoding some 2.4 KB of
mixed-script UTF-8 into a ``str`` only for orjson to encode it back cost about 8 us of the 70 us
of client CPU a large benchmark document took (psycopg's fetch 12.3 -> 4.1 us a row).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from sqlalchemy.dialects.postgresql import BIT, aggregate_order_by

from sparkindex.checksums import RangeChecksum
from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, Key, Page, Row
from sparkindex.documents.canonical_sql import SLOW_MARK, canonical_document_or_reason
from sparkindex.documents.floats import restore_floats
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.documents.transforming import TransformCache
from sparkindex.errors import DocumentError
from sparkindex.keys import document_id
from sparkindex.sources.base import KeyRange, Source, coerce_key

log = logging.getLogger(__name__)

#: the execution option naming the type of the document column, which the statement's cursor
#: then loads as bytes (see :func:`raw_document_cursor`)
RAW_DOCUMENT_OPTION = "sparkindex_raw_document"


def raw_document_cursor(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    """``before_cursor_execute``: on a statement run with :data:`RAW_DOCUMENT_OPTION`, this cursor
    (and only it: the connection goes back to the pool as it was) loads that type as bytes."""
    type_name = context.execution_options.get(RAW_DOCUMENT_OPTION) if context is not None else None
    if type_name:
        cursor.adapters.register_loader(type_name, RawDocumentLoader)


class RawDocumentLoader(Loader):
    """A document as the server sent it (UTF-8 bytes): orjson parses bytes, and canonical bytes
    need no parsing at all."""

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


class JsonAggregationBuilder(DocumentBuilder):
    def __init__(
        self,
        source: Source,
        plan: IndexPlan,
        transform_cache: TransformCache | None = None,
        server_canonical: bool = True,
    ) -> None:
        """*server_canonical*: let the server write canonical JSON where the plan's types allow
        (off: every document takes the decoding path, the reference the fast path is held to)."""
        super().__init__(source, plan, transform_cache)
        self._root = plan.rows.table.alias("r0")
        self._keys = [self._root.c[k] for k in plan.id_columns]
        #: beside the keys: the version column, then the routing column, where the plan has them
        self._extra = [self._root.c[c] for c in (plan.version, plan.routing) if c is not None]
        self._version_at = len(self._keys) if plan.version else None
        self._routing_at = len(self._keys) + len(self._extra) - 1 if plan.routing else None
        engine = source.engine
        self._psycopg = engine.dialect.driver == "psycopg"
        if self._psycopg and not sa.event.contains(engine, "before_cursor_execute", raw_document_cursor):
            sa.event.listen(engine, "before_cursor_execute", raw_document_cursor)
        canonical = None
        #: why the server does not write the canonical JSON (None: it does), for `explain`
        self.decoding_reason: str | None = None
        if not self._psycopg:
            self.decoding_reason = f"the driver is {engine.dialect.driver}, whose cursor cannot load documents as bytes"
        elif not server_canonical:
            self.decoding_reason = "server-written JSON is turned off for this builder"
        elif plan.join_field is not None:
            self.decoding_reason = "the index has join relations, whose join field is added in Python"
        elif plan.config.transform is not None:
            self.decoding_reason = "the index has a transform, which runs on the decoded document in Python"
        else:
            canonical, self.decoding_reason = canonical_document_or_reason(
                self._root, plan.rows, plan.emit, plan.embedded
            )
        self._use(canonical)
        self._server_checked = canonical is None

    def _use(self, canonical: Any) -> None:
        """Take the server-written canonical JSON (*canonical*), or ``json_build_object`` when
        None; how the cursor loads the document column and the statement follow from it."""
        #: the server writes canonical JSON itself (see canonical_sql)
        self._canonical = canonical
        # canonical: a text column, the statement's only one (see _select); else json
        self._options: dict[str, Any] = {}
        if self._psycopg:
            self._options = {RAW_DOCUMENT_OPTION: "text" if canonical is not None else "json"}
        #: built once: the statement only gains its page's bounds (rebuilding the nested
        #: json_build_object tree and its cache key per page cost about 1 us a document)
        self._doc_select = self._select()

    def _check_server(self, conn: sa.Connection) -> None:
        """On the first statement: keep the server-written path only where the server's text is
        what canonical_sql assumes: UTF-8 (a SQL_ASCII database converts nothing, so its bytes
        may be anything) and shortest round-trip floats (PostgreSQL 12 on; 11 wrote %.16g)."""
        if self._server_checked:
            return
        self._server_checked = True
        encoding = conn.connection.dbapi_connection.info.parameter_status("server_encoding")  # type: ignore[union-attr]
        version = conn.dialect.server_version_info or (0,)
        if encoding != "UTF8" or version < (12,):
            self.decoding_reason = (
                f"the server's encoding is {encoding or '?'} and its version {'.'.join(map(str, version))}: "
                "canonical text needs UTF8 and PostgreSQL 12 or later"
            )
            log.warning(
                "table %r: documents are re-encoded in Python (the server's encoding is %s, version %s)",
                self.plan.table.name,
                encoding or "?",
                ".".join(map(str, version)),
            )
            self._use(None)

    @property
    def writes_canonical(self) -> bool:
        """Whether the server writes the canonical JSON (the decoding path only for marked values)."""
        return self._canonical is not None

    def _object(self, table: Any, emit: Sequence[str], relations: Sequence[RelationPlan]) -> Any:
        args: list[Any] = []
        for col in emit:
            args += [sa.literal(col), table.c[col]]
        for rel in relations:
            child = rel.rows.table.alias()
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
        """Rows of (id columns..., [version], document JSON): bytes on psycopg, text elsewhere
        (a ``json`` column would be decoded by the driver)."""
        if self._canonical is not None:
            # The cursor loads ``text`` as bytes for the document, so a key or version column
            # of type text travels as varchar (binary-coercible: the same value, no conversion).
            beside = [
                sa.cast(c, sa.String).label(c.name) if isinstance(c.type, sa.TEXT) else c
                for c in [*self._keys, *self._extra]
            ]
            return sa.select(*beside, self._canonical)
        doc = self._object(self._root, self.plan.emit, self.plan.embedded)
        if not self._options:
            doc = sa.cast(doc, sa.Text)
        doc = doc.label("doc")
        return sa.select(*self._keys, *self._extra, doc)

    def statement(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int | None) -> sa.Select[Any]:
        plan = self.plan
        stmt = self._doc_select
        start = coerce_key(plan.rows, plan.id_columns, after if after is not None else rng.after)
        upto = coerce_key(plan.rows, plan.id_columns, rng.upto)
        if start is not None:
            stmt = stmt.where(Source._key_cond(self._keys, ">", start))
        if upto is not None:
            stmt = stmt.where(Source._key_cond(self._keys, "<=", upto))
        stmt = stmt.order_by(*self._keys)
        return stmt.limit(limit) if limit is not None else stmt

    def _documents(self, rows: Sequence[Row]) -> tuple[list[BuiltDocument], list[DocumentError]]:
        """Each row (id columns, [version], [routing], JSON text) as a canonical document or a
        failure naming its id, in the rows' order; then the join children of the rows."""
        n = len(self._keys)
        canonical = self._canonical is not None
        results: list[BuiltDocument | DocumentError | None] = []
        decoded: list[tuple[int, dict[str, Any]]] = []  # (position in results, decoded body)
        for row in rows:
            raw = row[-1]
            if canonical and SLOW_MARK not in raw:
                results.append(
                    self.finish_canonical(row[:n], raw, self._at(row, self._version_at), self._routing_of(row))
                )
                continue
            if canonical:
                raw = raw.replace(SLOW_MARK, b"")  # PostgreSQL's own JSON: decoded as before
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                results.append(DocumentError(document_id(row[:n]), str(exc), "InvalidJSON"))
                continue
            restore_floats(body, self._floats)
            decoded.append((len(results), body))
            results.append(None)
        ids = [document_id(rows[at][:n]) for at, _ in decoded]
        for (at, _), body in zip(decoded, self.transformed(ids, [b for _, b in decoded], decoded=True), strict=True):
            row = rows[at]
            results[at] = (
                body
                if isinstance(body, DocumentError)
                else self.finish(row[:n], body, self._at(row, self._version_at), self._routing_of(row))
            )
        docs = [r for r in results if isinstance(r, BuiltDocument)]
        failures = [r for r in results if isinstance(r, DocumentError)]
        if self.plan.joins:
            self.join_children([tuple(r[:n]) for r in rows], docs, failures)
        return docs, failures

    @staticmethod
    def _at(row: Row, position: int | None) -> Any:
        return None if position is None else row[position]

    def _routing_of(self, row: Row) -> str | None:
        value = self._at(row, self._routing_at)
        return None if value is None else str(value)

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        with self.source.connect(f"a page of documents from table {self.plan.table.name!r}") as conn:
            self._check_server(conn)
            rows = conn.execute(self.statement(rng, after, limit), execution_options=self._options).fetchall()
        docs, failures = self._documents(rows)
        last = tuple(rows[-1][: len(self._keys)]) if rows else None
        return Page(docs, failures, len(rows), last, len(docs) + len(failures) - len(rows))

    @property
    def _integer_keys(self) -> bool:
        """Whether every key column is an integer, whose text in SQL is document_id's."""
        return all(isinstance(self.plan.rows.columns[c].type, sa.Integer) for c in self.plan.id_columns)

    def database_checksum(self, rng: KeyRange) -> RangeChecksum | None:
        """The range's checksum (:mod:`sparkindex.checksums`) computed by the server in one
        statement: it writes each document's canonical JSON as a page would, takes the MD5 of the
        plan's hash key and those bytes, and sums the halves of its first 8 bytes. Three numbers
        cross the wire, whatever the range holds.

        None where the server does not write the canonical JSON (see ``decoding_reason``) or a
        key column is not an integer (the id is hashed too, as document_id writes it), and
        for a range holding a value it cannot promise (marked ``\\x01``: such a document's bytes
        are made in Python), where the caller builds the range's documents instead."""
        found = self._hashed(rng, self._checksum_statement, "a checksum")
        if found is None:
            return None
        [(n, marked, hi, lo)] = found
        if marked:
            return None
        return RangeChecksum(int(n), int(hi or 0), int(lo or 0))

    def database_checks(self, rng: KeyRange) -> list[tuple[Key, int | None]] | None:
        """Each row of the range as its key and its document's check, written and hashed by the
        server (keys and 8 bytes a row cross the wire, no document): how a range whose checksums
        differ is compared key by key. A document holding a value only Python writes canonically
        gets None (the caller builds it); None for the whole range where the server does not
        write the canonical JSON."""
        rows = self._hashed(rng, self._checks_statement, "the checks")
        if rows is None:
            return None
        n = len(self._keys)
        return [(tuple(r[:n]), None if r[n] else (int(r[n + 1]) << 32) | int(r[n + 2])) for r in rows]

    def _hashed(self, rng: KeyRange, statement: Callable[[KeyRange], sa.Select[Any]], what: str) -> list[Any] | None:
        """The rows of *statement* over *rng*; None where the server does not write the canonical
        JSON, or a key column is not an integer (the id is hashed too, as document_id writes it)."""
        if self._canonical is None or not self._integer_keys:
            return None
        with self.source.connect(f"{what} of a range of table {self.plan.table.name!r}") as conn:
            self._check_server(conn)
            if self._canonical is None:
                return None
            # compiling the statement to machine code costs more than it saves here (measured:
            # 1.9 s of a 4.3 s range of 20k shop documents); the setting ends with the transaction
            conn.execute(sa.text("SET LOCAL jit = off"))
            return list(conn.execute(statement(rng)).fetchall())

    def _digests(self, rng: KeyRange) -> Any:
        """The range's rows as (key columns..., md5 of the hash key and the canonical JSON, whether
        the document holds a value marked for Python), a subquery."""
        # OFFSET 0 keeps the planner from inlining the documents into the digests: the document
        # expression, with its correlated subqueries, would then be evaluated once per use
        docs = self.statement(rng, None, None).order_by(None).offset(0).subquery("d")
        columns = list(docs.c)
        doc, keys = columns[-1], columns[: len(self._keys)]
        # the id as document_id writes it: the integer keys' digits, joined by "|" (integers need
        # no escaping), then a NUL byte, then the document (see checksums.document_check)
        doc_id = keys[0].cast(sa.Text) if len(keys) == 1 else sa.func.concat_ws("|", *keys)
        data: Any = sa.func.convert_to(doc_id, "UTF8").op("||")(sa.func.decode("00", "hex"))
        data = data.op("||")(sa.func.convert_to(doc, "UTF8"))
        if self._hash_key:
            data = sa.func.decode(self._hash_key.hex(), "hex").op("||")(data)
        marked = (sa.func.strpos(doc, SLOW_MARK.decode("ascii")) > 0).label("marked")
        return sa.select(*keys, sa.func.md5(data).label("m"), marked).subquery("h")

    @staticmethod
    def _half(digest: Any, start: int) -> Any:
        """32 bits of an MD5's hex text, from hex digit *start* (1-based), as a bigint."""
        hex_digits = sa.literal("x").op("||")(sa.func.substr(digest, start, 8))
        return sa.cast(sa.cast(hex_digits, BIT(32)), sa.BigInteger)

    def _checksum_statement(self, rng: KeyRange) -> sa.Select[Any]:
        h = self._digests(rng)
        marked = sa.func.count().filter(h.c.marked)
        return sa.select(sa.func.count(), marked, sa.func.sum(self._half(h.c.m, 1)), sa.func.sum(self._half(h.c.m, 9)))

    def _checks_statement(self, rng: KeyRange) -> sa.Select[Any]:
        h = self._digests(rng)
        keys = list(h.c)[: len(self._keys)]
        return sa.select(*keys, h.c.marked, self._half(h.c.m, 1), self._half(h.c.m, 9))

    def by_keys(self, keys: Sequence[Key]) -> tuple[list[BuiltDocument], list[DocumentError], list[str]]:
        wanted = self._coerced(keys)
        n = len(self._keys)
        per = max(1, self.source.max_in_params // n)
        rows: list[Row] = []
        with self.source.connect(f"documents of table {self.plan.table.name!r} by key") as conn:
            self._check_server(conn)
            for i in range(0, len(wanted), per):
                chunk = wanted[i : i + per]
                cond = self._keys[0].in_([k[0] for k in chunk]) if n == 1 else sa.tuple_(*self._keys).in_(chunk)
                stmt = self._doc_select.where(cond).order_by(*self._keys)
                rows.extend(conn.execute(stmt, execution_options=self._options).fetchall())
        docs, failures = self._documents(rows)
        return docs, failures, self._missing(wanted, [tuple(r[:n]) for r in rows])
