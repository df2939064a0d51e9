"""An independent baseline for the wide-child-rows shape: the loop a user writes without sparkindex.

Why a second baseline: bench/naive.py reuses the pipeline's own DocumentBuilder and Tantivy
conversion, so a ratio against it can never show that those are too slow. This loop
shares none of the package's code on its path: the raw driver (``sqlite3``, psycopg), keyset pages
of the root (``WHERE id > last ORDER BY id LIMIT 1000``), the lines of a page by one ``IN`` query
(``= ANY(%s)`` on PostgreSQL, psycopg's spelling of it), the customer -> company -> country chain
by one ``LEFT JOIN`` query per page, a dict per row, orjson, and one Tantivy writer (256 MB heap,
two indexing threads, like the naive loop).

To be a fair yardstick it must index exactly what the pipeline indexes, so both sides pay the
same Tantivy cost: the schema is written out by hand to equal ``build_schema(infer_mapping(plan))``
for bench/wide.py's pipeline (:func:`schema_mismatch` checks it; bench_wide refuses to measure
otherwise), the stored ``_source`` is the same canonical JSON (sorted keys, the same date and
float spellings), and ``_id``, ``_hash`` and ``_key`` hold the same values. What a user would not
write but the comparison needs (the content hash, the sortable ``_key``) is written here in the
plainest way and noted where it is. tests/bench/test_wide_independent.py compares the documents
with the pipeline builder's, row for row.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import tantivy

from bench.wide import COLUMNS

PAGE = 1000
HEAP = 256 * 1024 * 1024

ROOT_COLUMNS = COLUMNS["orders"]
LINE_COLUMNS = COLUMNS["order_lines"]
CUSTOMER_COLUMNS = COLUMNS["customers"]
COMPANY_COLUMNS = COLUMNS["companies"]
COUNTRY_COLUMNS = COLUMNS["countries"]

_ROOT_SQL = f"SELECT {', '.join(ROOT_COLUMNS)} FROM orders"
_LINES_SQL = f"SELECT {', '.join(LINE_COLUMNS)} FROM order_lines WHERE {{where}} ORDER BY id"
_CHAIN_COLUMNS = [
    *(f"cu.{c}" for c in CUSTOMER_COLUMNS),
    *(f"co.{c}" for c in COMPANY_COLUMNS),
    *(f"ct.{c}" for c in COUNTRY_COLUMNS),
]
_CHAIN_SQL = (
    f"SELECT {', '.join(_CHAIN_COLUMNS)} FROM customers cu"
    " LEFT JOIN companies co ON co.id = cu.company_id"
    " LEFT JOIN countries ct ON ct.code = co.country_code WHERE {where}"
)


def hand_schema() -> tantivy.Schema:
    """The wide index's Tantivy schema, written out field by field as a user would.

    The four bookkeeping fields first (``_id`` for upserts, the content hash, the sortable key,
    the stored source), then the root's columns in table order, ``title``'s keyword sub-field
    right after it, the two relations as JSON fields, and the ``all_text`` copy target last:
    the order and options the pipeline's translation of its inferred mapping produces.
    """
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("_id", stored=True, tokenizer_name="raw", fast=True)
    sb.add_text_field("_hash", stored=True, tokenizer_name="raw")
    sb.add_text_field("_key", stored=True, tokenizer_name="raw", fast=True)
    sb.add_bytes_field("_source", stored=True, indexed=False)
    sb.add_integer_field("id", indexed=True, fast=True)
    sb.add_text_field("number", tokenizer_name="raw", fast=True)
    sb.add_text_field("title", tokenizer_name="en_stem")
    sb.add_text_field("title.keyword", tokenizer_name="raw", fast=True)
    sb.add_text_field("status", tokenizer_name="raw", fast=True)
    sb.add_date_field("placed_at", indexed=True, fast=True)
    sb.add_float_field("total", indexed=True, fast=True)
    sb.add_text_field("note", tokenizer_name="en_stem")
    sb.add_integer_field("customer_id", indexed=True, fast=True)
    sb.add_json_field("customer")
    sb.add_json_field("lines")
    sb.add_text_field("all_text", tokenizer_name="default")
    return sb.build()


class WideDb:
    """The two drivers behind one tiny interface: a query, and an ``IN`` condition on a list."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite:///")
        self.conn: Any
        if self.sqlite:
            self.conn = sqlite3.connect(url[len("sqlite:///") :])
        else:
            import psycopg

            self.conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
        self.mark = "?" if self.sqlite else "%s"

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.conn.execute(sql, params).fetchall()
        return rows

    def where_in(self, column: str, values: Sequence[Any]) -> tuple[str, Sequence[Any]]:
        if self.sqlite:
            return f"{column} IN ({', '.join('?' * len(values))})", values
        return f"{column} = ANY(%s)", [list(values)]

    def close(self) -> None:
        self.conn.close()


def _customers(db: WideDb, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The page's customers with their company and its country, nested; None where missing."""
    if not ids:
        return {}
    where, params = db.where_in("cu.id", ids)
    out: dict[int, dict[str, Any]] = {}
    n_cu, n_co = len(CUSTOMER_COLUMNS), len(COMPANY_COLUMNS)
    for row in db.rows(_CHAIN_SQL.format(where=where), params):
        customer = dict(zip(CUSTOMER_COLUMNS, row[:n_cu], strict=True))
        company: dict[str, Any] | None = None
        if row[n_cu] is not None:
            company = dict(zip(COMPANY_COLUMNS, row[n_cu : n_cu + n_co], strict=True))
            country = row[n_cu + n_co :]
            company["country"] = None if country[0] is None else dict(zip(COUNTRY_COLUMNS, country, strict=True))
        customer["company"] = company
        out[customer["id"]] = customer
    return out


def _lines(db: WideDb, order_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    where, params = db.where_in("order_id", order_ids)
    out: dict[int, list[dict[str, Any]]] = {}
    for row in db.rows(_LINES_SQL.format(where=where), params):
        out.setdefault(row[1], []).append(dict(zip(LINE_COLUMNS, row, strict=True)))
    return out


def pages(db: WideDb, page: int = PAGE) -> Iterator[list[dict[str, Any]]]:
    """The documents, one keyset page of orders at a time.

    SQLite hands back a timestamp as the text it stores ('2023-05-13 10:42:13'); the document
    spells it as ISO 8601 with a ``T`` like every JSON encoder does for a datetime (psycopg's
    datetime is left to orjson). Dates stay 'YYYY-MM-DD' either way.
    """
    last: int | None = None
    while True:
        if last is None:
            roots = db.rows(f"{_ROOT_SQL} ORDER BY id LIMIT {page}")
        else:
            roots = db.rows(f"{_ROOT_SQL} WHERE id > {db.mark} ORDER BY id LIMIT {page}", (last,))
        if not roots:
            return
        ids = [r[0] for r in roots]
        lines = _lines(db, ids)
        customers = _customers(db, sorted({r[7] for r in roots if r[7] is not None}))
        docs = []
        for oid, number, title, status, placed_at, total, note, customer_id in roots:
            if isinstance(placed_at, str):
                placed_at = placed_at.replace(" ", "T", 1)
            docs.append(
                {
                    "id": oid,
                    "number": number,
                    "title": title,
                    "status": status,
                    "placed_at": placed_at,
                    "total": total,
                    "note": note,
                    "customer_id": customer_id,
                    "customer": None if customer_id is None else customers.get(customer_id),
                    "lines": lines.get(oid, []),
                }
            )
        yield docs
        if len(roots) < page:
            return
        last = ids[-1]


def encode(doc: dict[str, Any]) -> tuple[str, bytes, bytes]:
    """``(id, stored source, Tantivy JSON)`` of one document; *doc* becomes the Tantivy body.

    The source is the sorted-key JSON (what the pipeline stores and hashes); the body is the same
    dict changed in place: top-level NULLs dropped (Tantivy refuses a JSON null), the root date in
    RFC 3339, ``title`` copied to its keyword sub-field and, with ``note``, into ``all_text``, and
    the bookkeeping fields added.
    """
    source = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    oid = doc["id"]
    doc_id = str(oid)
    for name in ("total", "note", "customer_id", "customer"):
        if doc[name] is None:
            del doc[name]
    stamp = doc["placed_at"]
    if isinstance(stamp, str):
        doc["placed_at"] = stamp + "Z"  # a datetime (psycopg) gets +00:00 from OPT_NAIVE_UTC
    title, note = doc["title"], doc.get("note")
    doc["title.keyword"] = title
    doc["all_text"] = [title] if note is None else [title, note]
    doc["_id"] = doc_id
    # Not what a user would write, but the pipeline stores both: a content hash (BLAKE2b-128 of
    # the stored bytes) and a key whose text sorts like the key (a tag byte, then the integer
    # shifted to unsigned, big-endian, in hex).
    doc["_hash"] = hashlib.blake2b(source, digest_size=16).hexdigest()
    doc["_key"] = (b"\x03" + (oid + 2**63).to_bytes(8, "big")).hex()
    doc["_source"] = base64.b64encode(source).decode("ascii")  # Tantivy takes bytes fields as base64
    return doc_id, source, orjson.dumps(doc, option=orjson.OPT_NAIVE_UTC)


@dataclass(frozen=True)
class IndependentResult:
    """The same figures as bench/naive.py's NaiveResult, defined here so that importing this
    module never loads the package's builder or conversion."""

    docs: int
    seconds: float
    cpu_cores: float  # process CPU time / wall: Tantivy's writer threads count too
    avg_doc_bytes: float  # mean stored source size

    @property
    def docs_per_s(self) -> float:
        return self.docs / self.seconds if self.seconds else 0.0


def independent_loop(url: str, out_dir: Path, writer_threads: int = 2) -> IndependentResult:
    """Index the wide database at *url* (``sqlite:///path`` or a PostgreSQL URL) into *out_dir*.

    The clock starts once the connection and the index are open, as for the naive loop.
    """
    db = WideDb(url)
    out_dir.mkdir(parents=True)
    index = tantivy.Index(hand_schema(), path=str(out_dir))
    writer = index.writer(HEAP, writer_threads)
    add_json = writer.add_json
    started, cpu0 = time.perf_counter(), time.process_time()
    n, size = 0, 0
    try:
        for docs in pages(db):
            for doc in docs:
                _, source, body = encode(doc)
                add_json(body.decode())
                size += len(source)
            n += len(docs)
        writer.commit()
        writer.wait_merging_threads()
    finally:
        db.close()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    return IndependentResult(n, wall, cpu / wall if wall else 0.0, size / n if n else 0.0)


def schema_fields(schema: tantivy.Schema) -> list[dict[str, Any]]:
    """A schema's fields with their options, as tantivy pickles them (for a readable diff)."""
    try:
        state: Any = schema.__reduce__()[1][0]  # (constructor, ({"inner": [field, ...]},))
        fields: list[dict[str, Any]] = list(state["inner"])
    except (AttributeError, IndexError, KeyError, TypeError):  # another tantivy's pickling
        return []
    return fields


def schema_mismatch(pipeline: Path) -> list[str]:
    """How the hand-written schema differs from the one the pipeline derives for *pipeline*'s
    first index; empty when they are equal. Only the check loads the package, never the loop."""
    from sparkindex.config import load_pipeline
    from sparkindex.documents import infer_mapping, resolve_index
    from sparkindex.resources import open_source_url
    from sparkindex.targets.tantivy.schema import build_schema

    config = load_pipeline(pipeline)
    with open_source_url(config.source_url()) as source:
        plan = resolve_index(source, config.indexes[0], "indexes[0]")
        theirs, _ = build_schema(infer_mapping(plan, "indexes[0]"))
    ours = hand_schema()
    if ours == theirs:
        return []
    mine = {f["name"]: f for f in schema_fields(ours)}
    pipeline_fields = {f["name"]: f for f in schema_fields(theirs)}
    out = [
        f"{name}: pipeline has {spec}, hand-written {mine.get(name)}"
        for name, spec in pipeline_fields.items()
        if mine.get(name) != spec
    ]
    out += [f"{name}: only hand-written" for name in mine if name not in pipeline_fields]
    if not out:
        order = [f["name"] for f in schema_fields(theirs)]
        out.append(f"the fields are equal but their order differs: the pipeline's is {order}")
    return out
