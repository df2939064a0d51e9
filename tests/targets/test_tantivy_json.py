"""The Tantivy conversion's spliced path (a speed-up) indexes what the encoding before it did.

``to_tantivy_json`` appends overrides to the canonical bytes instead of encoding the document
again (:func:`sparkindex.targets.tantivy.schema._spliced`). That relies on Tantivy reading a
later key over an earlier one, and on ``[]`` meaning "no value": both are pinned against real
Tantivy here. Every hostile document, read the way Tantivy reads it, must mean exactly what
:func:`reference_body` (the conversion as it was before the splice, kept verbatim) gives.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
import json
from typing import Any

import orjson
import pytest
import tantivy

from sparkindex.checksums import check_halves
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.encoding import json_default
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy.schema import (
    SchemaPlan,
    _rfc3339,
    build_schema,
    to_tantivy_json,
    with_checks,
    without_marker,
)

MAPPING: dict[str, Any] = {
    "properties": {
        "id": {"type": "long"},
        "title": {"type": "text", "copy_to": ["all_text"], "fields": {"keyword": {"type": "keyword"}}},
        "note": {"type": "text", "copy_to": ["all_text"]},
        "all_text": {"type": "text"},
        "placed_at": {"type": "date"},
        "shipped_on": {"type": "date"},
        "total": {"type": "double"},
        "label": {"type": "keyword"},
        "lines": {"type": "nested"},
        "customer": {"type": "object"},
    }
}
#: what the review found the first splice got wrong: copies from a date, a keyword sub-field of
#: a date and of a copy target, a chained copy; such a plan must take the dict path
RISKY: dict[str, Any] = {
    "properties": {
        **MAPPING["properties"],
        "placed_at": {"type": "date", "copy_to": ["all_text"], "fields": {"keyword": {"type": "keyword"}}},
        "all_text": {"type": "text", "copy_to": ["everything"], "fields": {"keyword": {"type": "keyword"}}},
        "everything": {"type": "text"},
    }
}

STAMP = dt.datetime(2022, 3, 4, 5, 6, 7)
DOCS: list[dict[str, Any]] = [
    {"id": 1, "title": "Zürich «café»", "note": None, "placed_at": STAMP, "total": None, "label": "a,b"},
    {"id": 2, "title": None, "note": "n", "placed_at": None, "shipped_on": dt.date(2022, 1, 2), "label": None},
    {"id": 3, "title": "t", "placed_at": dt.datetime(2022, 3, 4, 5, 6, 7, 891000), "all_text": "already"},
    {"id": 4, "title": "t", "placed_at": "2022-03-04T05:06:07", "label": "2022-03-04T05:06:07"},  # a text twin
    {"id": 5, "lines": [{"ship": STAMP, "qty": None, "on": dt.date(2022, 1, 1)}], "placed_at": STAMP},  # nested naive
    {"id": 6, "customer": {"company": {"since": STAMP, "name": None}}, "title": "東京"},
    {"id": 7, "customer": None, "lines": [], "placed_at": dt.datetime(2022, 3, 4, 5, 6, 7, tzinfo=dt.UTC)},
    {"id": 8, "lines": [{"on": dt.date(2022, 1, 1), "note": 'q"uote\\'}], "title": ["x", "y"], "note": ["z"]},
    {"id": 9, "all_text": ["a", "b"], "title": "t", "shipped_on": "2022-01-02", "_source": None, "_key": 1},
]
SPLICED = {1, 2, 3, 7, 8, 9}  # with MAPPING; 4, 5 and 6 carry a naive datetime elsewhere


def reference_body(item: BulkItem, plan: SchemaPlan) -> bytes:
    """The conversion before the splice (e439071^), verbatim but for its error handling."""
    source = item.source or b"{}"
    fields = item.fields if item.fields is not None else orjson.loads(source)
    body = {k: v for k, v in fields.items() if v is not None}
    for name in plan.dates:
        if name in body:
            body[name] = _rfc3339(body[name])
    for src, dst in plan.copies:
        value = body.get(src)
        if value is not None:
            existing = body.get(dst)
            values = existing if isinstance(existing, list) else ([] if existing is None else [existing])
            values.extend(value if isinstance(value, list) else [value])
            body[dst] = [str(v) for v in values]
    for src, sub in plan.keyword_subfields:
        if body.get(src) is not None:
            body[sub] = body[src]
    body["_id"] = item.id
    body["_hash"] = item.hash or ""
    if item.sort_key is not None:
        body["_key"] = item.sort_key
    body["_source"] = base64.b64encode(source).decode("ascii")
    return orjson.dumps(body, default=json_default, option=orjson.OPT_NAIVE_UTC | orjson.OPT_NON_STR_KEYS)


def item(doc: dict[str, Any]) -> BulkItem:
    canonical = dumps_document(doc)
    fields = copy.deepcopy(doc)  # the reference extends a list it was given in place
    return BulkItem(str(doc["id"]), canonical, content_hash(canonical), fields=fields, sort_key=f"k{doc['id']}")


def as_tantivy_reads(body: bytes, mapping: dict[str, Any]) -> dict[str, Any]:
    """The fields of the schema as Tantivy's map reads *body*: a later key wins, ``[]`` is no value."""
    parsed: dict[str, Any] = json.loads(body)
    names = {"_id", "_hash", "_key", "_source"} | set(mapping["properties"])
    names |= {f"{n}.keyword" for n, spec in mapping["properties"].items() if "keyword" in spec.get("fields", {})}
    return {k: v for k, v in parsed.items() if v != [] and k in names}


@pytest.mark.parametrize("mapping", [MAPPING, RISKY], ids=["mapping", "risky"])
@pytest.mark.parametrize("doc", DOCS, ids=[f"doc{d['id']}" for d in DOCS])
def test_the_conversion_means_what_it_meant_before_the_splice(doc: dict[str, Any], mapping: dict[str, Any]) -> None:
    _, plan = build_schema(mapping)
    new = to_tantivy_json(item(doc), plan)
    assert as_tantivy_reads(new, mapping) == as_tantivy_reads(reference_body(item(doc), plan), mapping)


@pytest.mark.parametrize("doc", DOCS, ids=[f"doc{d['id']}" for d in DOCS])
def test_the_splice_is_taken_where_it_may_be(doc: dict[str, Any]) -> None:
    source = item(doc).source or b""
    _, plan = build_schema(MAPPING)
    assert to_tantivy_json(item(doc), plan).startswith(source[:-1]) == (doc["id"] in SPLICED)
    _, risky = build_schema(RISKY)
    assert not risky.spliceable and not to_tantivy_json(item(doc), risky).startswith(source[:-1])


def test_tantivy_reads_a_later_key_over_an_earlier_one_and_an_empty_list_as_no_value() -> None:
    schema, plan = build_schema(MAPPING)
    index = tantivy.Index(schema)
    writer = index.writer(15_000_000, 1)
    for doc in DOCS:
        writer.add_json(to_tantivy_json(item(doc), plan).decode())
    writer.commit()
    index.reload()
    searcher = index.searcher()

    def ids(query: str) -> list[str]:
        hits = searcher.search(index.parse_query(query, ["title"]), 20).hits
        return sorted(searcher.doc(address)["_id"][0] for _, address in hits)

    assert searcher.num_docs == len(DOCS)
    # the offset override won over the naive value (dates are indexed to the second: 3 matches too)
    assert ids('placed_at:"2022-03-04T05:06:07Z"') == ["1", "3", "4", "5", "7"]
    assert ids("shipped_on:[2022-01-01T00:00:00Z TO 2022-01-03T00:00:00Z]") == ["2", "9"]
    assert ids("total:[* TO *]") == []  # total: null became [] (no value), never an error
    assert ids('all_text:"already"') == ["3"] and ids("all_text:zürich") == ["1"] and ids("all_text:b") == ["9"]
    assert ids('title.keyword:"Zürich «café»"') == ["1"] and ids('title.keyword:"東京"') == ["6"]
    stored = {searcher.doc(a)["_id"][0]: searcher.doc(a) for _, a in searcher.search(index.parse_query("*"), 20).hits}
    assert stored["9"]["_key"] == ["k9"] and orjson.loads(stored["9"]["_source"][0])["_key"] == 1


@pytest.mark.parametrize("doc", DOCS, ids=[f"doc{d['id']}" for d in DOCS])
def test_both_paths_write_the_check_halves_where_the_schema_has_them(doc: dict[str, Any]) -> None:
    check = 2**64 - 1 - doc["id"]
    with_check = dataclasses.replace(item(doc), check=check)
    _, plan = build_schema(with_checks(MAPPING))
    _, risky = build_schema(with_checks(RISKY))
    assert plan.checks and risky.checks
    # the spliced path (where taken), the dict path, and the dict path decoding the bytes itself
    for converted, p in ((with_check, plan), (with_check, risky), (dataclasses.replace(with_check, fields=None), plan)):
        body = json.loads(to_tantivy_json(converted, p))
        assert (body["_check_hi"], body["_check_lo"]) == check_halves(check)
    _, old = build_schema(MAPPING)  # an index from before checks: its schema has no such fields
    assert not old.checks and "_check_hi" not in json.loads(to_tantivy_json(with_check, old))
    assert "_check_hi" not in json.loads(to_tantivy_json(item(doc), plan))  # an item without a check


def test_the_marker_adds_the_check_fields_as_fast_integers() -> None:
    marked = with_checks(MAPPING)
    assert without_marker(marked) == MAPPING
    schema, plan = build_schema(marked)
    index = tantivy.Index(schema)
    writer = index.writer(15_000_000, 1)
    writer.add_json(to_tantivy_json(dataclasses.replace(item(DOCS[0]), check=2**40 + 3), plan).decode())
    writer.commit()
    index.reload()
    stats = index.searcher().aggregate(tantivy.Query.all_query(), {"h": {"stats": {"field": "_check_hi"}}})
    assert (stats["h"]["count"], stats["h"]["sum"]) == (1, 2**8)
