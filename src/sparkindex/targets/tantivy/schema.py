"""Translating the ES-style mapping into a Tantivy schema, and documents into Tantivy JSON.

Tantivy has no nested documents, copy_to or multi-fields, so this module emulates them:
objects and nested arrays become JSON fields (searchable by path), ``copy_to`` and keyword
sub-fields are filled in when a document is converted. ``_id`` (raw, for upserts), ``_hash``,
``_key`` (the sortable key, for key ranges) and ``_source`` are stored alongside.

Each document's range check (:mod:`sparkindex.checksums`) goes into two fast integer fields,
``_check_hi`` and ``_check_lo``, that a ``stats`` aggregation sums per key range. Only indexes
created since sparkindex writes them have those fields: Tantivy opens a directory only with the
schema it was created with, so the stored mapping of a new index carries :data:`CHECKS_MARKER`
and :func:`build_schema` adds the fields exactly when it is there. An index created before keeps
opening with its old schema, and its documents are written without checks.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
import tantivy

from sparkindex.checksums import CHECK_FIELDS, CHECK_HI_FIELD, CHECK_LO_FIELD, check_halves
from sparkindex.encoding import dumps_json
from sparkindex.errors import DocumentError
from sparkindex.targets.base import BulkItem
from sparkindex.targets.field_types import VECTOR_TYPES

ANALYZERS = {
    "standard": "default",
    "default": "default",
    "english": "en_stem",
    "en_stem": "en_stem",
    "keyword": "raw",
    "raw": "raw",
    "whitespace": "whitespace",
}


#: Elasticsearch's numeric and date variants, indexed as Tantivy's own types (anything else that
#: is not text or keyword, such as object, nested, ip or geo_point, becomes a JSON field)
INTEGER_TYPES = frozenset({"long", "integer", "short", "byte"})
FLOAT_TYPES = frozenset({"double", "float", "half_float", "scaled_float"})
DATE_TYPES = frozenset({"date", "date_nanos"})

#: The top-level key of a stored mapping (``sparkindex-mapping.json``) that says the index has the
#: check fields (see module doc). Not part of the user's mapping: the target strips it on reading.
CHECKS_MARKER = "_sparkindex_checks"


@dataclass
class SchemaPlan:
    """What the converter needs to know about each top-level field."""

    dates: list[str] = field(default_factory=list)
    copies: list[tuple[str, str]] = field(default_factory=list)  # (from, to)
    keyword_subfields: list[tuple[str, str]] = field(default_factory=list)
    text_fields: list[str] = field(default_factory=list)

    #: whether every copy and keyword sub-field reads a value the conversion leaves as it is:
    #: set by :func:`build_schema` (see :func:`_spliceable`); a plan built by hand never splices
    spliceable: bool = False
    #: whether the schema has the check fields (the stored mapping carries :data:`CHECKS_MARKER`)
    checks: bool = False


def with_checks(mapping: dict[str, Any]) -> dict[str, Any]:
    """*mapping* as a new index stores it: marked to have the check fields."""
    return {**mapping, CHECKS_MARKER: 1}


def without_marker(stored: dict[str, Any]) -> dict[str, Any]:
    """The user's mapping of a stored one (what it was created with, for rebuilds and reads)."""
    return {k: v for k, v in stored.items() if k != CHECKS_MARKER}


def build_schema(mapping: dict[str, Any]) -> tuple[tantivy.Schema, SchemaPlan]:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("_id", stored=True, tokenizer_name="raw", fast=True)
    sb.add_text_field("_hash", stored=True, tokenizer_name="raw")
    sb.add_text_field("_key", stored=True, tokenizer_name="raw", fast=True)
    sb.add_bytes_field("_source", stored=True, indexed=False)
    plan = SchemaPlan(checks=bool(mapping.get(CHECKS_MARKER)))
    if plan.checks:  # summed by aggregations only: columnar, neither indexed nor stored
        for name in CHECK_FIELDS:
            sb.add_integer_field(name, stored=False, indexed=False, fast=True)
    copy_targets: set[str] = set()
    for spec in mapping["properties"].values():
        copy_targets.update(spec.get("copy_to", []))
    for name, spec in mapping["properties"].items():
        ftype = spec["type"]
        indexed = spec.get("index", True)
        if (not indexed or ftype in VECTOR_TYPES) and name not in copy_targets:
            continue  # kept in the stored source only (Tantivy has no vector search: stored floats)
        if ftype == "text":
            tok = ANALYZERS.get(spec.get("analyzer", "standard"), spec.get("analyzer", "default"))
            sb.add_text_field(name, tokenizer_name=tok)
            plan.text_fields.append(name)
        elif ftype == "keyword":
            sb.add_text_field(name, tokenizer_name="raw", fast=True)
        elif ftype in INTEGER_TYPES:
            sb.add_integer_field(name, indexed=True, fast=True)
        elif ftype in FLOAT_TYPES:
            sb.add_float_field(name, indexed=True, fast=True)
        elif ftype == "boolean":
            sb.add_boolean_field(name, indexed=True, fast=True)
        elif ftype in DATE_TYPES:
            sb.add_date_field(name, indexed=True, fast=True)
            plan.dates.append(name)
        else:  # object, nested
            sb.add_json_field(name)
        for target in spec.get("copy_to", []):
            plan.copies.append((name, target))
        if "keyword" in spec.get("fields", {}):
            sub = f"{name}.keyword"
            sb.add_text_field(sub, tokenizer_name="raw", fast=True)
            plan.keyword_subfields.append((name, sub))
    plan.spliceable = _spliceable(plan)
    return sb.build(), plan


def _spliceable(plan: SchemaPlan) -> bool:
    """A copy or keyword sub-field whose source is a date field (converted to RFC 3339 first) or
    a copy target (filled by an earlier copy) would read it before its change on the spliced
    path, so such a plan always takes the dict path."""
    changed = set(plan.dates) | {dst for _, dst in plan.copies}
    sources = {src for src, _ in plan.copies} | {src for src, _ in plan.keyword_subfields}
    return not (sources & changed)


def _rfc3339(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    if not isinstance(value, str):
        return value
    # Fast paths for what orjson writes for naive datetimes and dates (the common case).
    if len(value) == 19 and value[10] == "T":
        return value + "Z"
    if len(value) == 10 and value[4] == "-":
        return value + "T00:00:00Z"
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return value  # let Tantivy reject it with its own message
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.isoformat()


#: a naive datetime as orjson writes it (no offset): Tantivy reads it as a date only once an
#: offset is added, which the dict path does everywhere and the spliced path cannot inside objects
#: (its time and the closing quote: a scan for "T" is four times cheaper than for the whole date)
_NAIVE_DATETIME = re.compile(rb'T\d\d:\d\d:\d\d(?:\.\d+)?"')


def to_tantivy_json(item: BulkItem, plan: SchemaPlan) -> bytes:
    """The JSON Tantivy indexes for one document (fields outside the schema are ignored).

    Why two paths: re-encoding every document was a tenth of a worker's time on wide documents
    (measured on the large-document benchmark). When the builder passed its field dict, the
    canonical bytes are reused as they are and only what Tantivy needs on top is appended
    (:func:`_spliced`); otherwise, or when a naive datetime must gain an offset inside an object,
    the document is encoded again from the dict. Both index the same document
    (tests/targets/test_tantivy_json.py).
    """
    source = item.source or b"{}"
    fields = item.fields
    if fields is not None and source[:1] == b"{" and plan.spliceable and _naive_only_at_top(source, fields, plan):
        return _spliced(item, source, fields, plan)
    return _encoded_again(item, source, fields, plan)


def _naive_only_at_top(source: bytes, fields: dict[str, Any], plan: SchemaPlan) -> bool:
    """Whether every naive datetime in *source* is the value of a top-level date field, which
    :func:`_spliced` replaces; one anywhere else needs the dict path to gain its offset."""
    found = len(_NAIVE_DATETIME.findall(source))
    if not found:
        return True
    at_top = 0
    for name in plan.dates:
        value = fields.get(name)
        if isinstance(value, dt.datetime):
            at_top += value.tzinfo is None
        elif isinstance(value, str):
            at_top += len(_NAIVE_DATETIME.findall(orjson.dumps(value)))
    return found == at_top


def _spliced(item: BulkItem, source: bytes, fields: dict[str, Any], plan: SchemaPlan) -> bytes:
    """The canonical bytes with the overrides and bookkeeping fields appended as later keys.

    Tantivy parses a document into a map where a later key replaces an earlier one, so a null
    (which Tantivy refuses) is replaced by ``[]`` (no value, as Elasticsearch reads a null), a
    date by its RFC 3339 form, a copy target by its merged values.
    """
    extra: dict[str, Any] = {k: [] for k, v in fields.items() if v is None}
    for name in plan.dates:
        value = fields.get(name)
        if value is not None:
            extra[name] = _rfc3339(value)
    _copy_fields(fields, extra, plan)
    _bookkeeping(item, extra, plan)
    body = _dumps(item.id, extra)  # never empty: it holds the bookkeeping fields
    # one join, not one copy of the document per step: the canonical bytes without their "}",
    # the extra keys without their braces, then the source
    head = (memoryview(source)[:-1], b",") if len(source) > 2 else (b"{",)  # "{}" has no key to follow
    return b"".join((*head, memoryview(body)[1:-1], b',"_source":"', base64.b64encode(source), b'"}'))


def _encoded_again(item: BulkItem, source: bytes, fields: dict[str, Any] | None, plan: SchemaPlan) -> bytes:
    if fields is None:
        try:
            fields = orjson.loads(source)
        except orjson.JSONDecodeError as exc:
            raise DocumentError(item.id, f"document is not valid JSON: {exc}", "InvalidJSON") from None
        if not isinstance(fields, dict):
            raise DocumentError(item.id, "document must be a JSON object", "InvalidJSON")
    # Tantivy rejects JSON null for every field type; like Elasticsearch, a null is a missing
    # field. `_source` keeps the original bytes, nulls included.
    body = {k: v for k, v in fields.items() if v is not None}
    for name in plan.dates:
        if name in body:
            body[name] = _rfc3339(body[name])
    _copy_fields(body, body, plan)
    _bookkeeping(item, body, plan)
    return _with_source(_dumps(item.id, body), source)


def _copy_fields(fields: dict[str, Any], out: dict[str, Any], plan: SchemaPlan) -> None:
    """``copy_to`` targets and keyword sub-fields, read from *fields* and written to *out*."""
    for src, dst in plan.copies:
        value = fields.get(src)
        if value is not None:
            existing = out[dst] if dst in out else fields.get(dst)
            if existing is None and type(value) is str:  # the usual first copy into a target
                out[dst] = [value]
                continue
            values = list(existing) if isinstance(existing, list) else ([] if existing is None else [existing])
            values.extend(value if isinstance(value, list) else [value])
            out[dst] = [str(v) for v in values]
    for src, sub in plan.keyword_subfields:
        if fields.get(src) is not None:
            out[sub] = fields[src]


def _bookkeeping(item: BulkItem, out: dict[str, Any], plan: SchemaPlan) -> None:
    out["_id"] = item.id
    out["_hash"] = item.hash or ""
    if item.sort_key is not None:
        out["_key"] = item.sort_key
    if plan.checks and item.check is not None:  # (Tantivy would ignore them on an older index)
        out[CHECK_HI_FIELD], out[CHECK_LO_FIELD] = check_halves(item.check)


def _with_source(body: bytes, source: bytes) -> bytes:
    """*body* (a JSON object with at least one key) with ``_source`` appended as base64, which is
    how Tantivy reads a bytes field from JSON (a stored-only text field does not exist). Written
    as bytes: the base64 alphabet needs no escaping, so orjson need not scan it again."""
    return b"".join((body[:-1], b',"_source":"', base64.b64encode(source), b'"}'))


def _dumps(doc_id: str, body: dict[str, Any]) -> bytes:
    try:
        return dumps_json(body, orjson.OPT_NAIVE_UTC)
    except TypeError as exc:
        raise DocumentError(doc_id, str(exc), "UnserializableValue") from None
