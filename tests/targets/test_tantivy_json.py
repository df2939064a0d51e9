"""The Tantivy conversion's two paths index the same document (issue 19).

``to_tantivy_json`` appends overrides to the canonical bytes instead of encoding the document
again (:func:`sparkindex.targets.tantivy.schema._spliced`). That relies on Tantivy reading a
later key over an earlier one, and on ``[]`` meaning "no value": both are pinned against real
Tantivy here, and every hostile document must mean, read the way Tantivy reads it, exactly what
the dict path (today's encoding, ``_encoded_again``) gives.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
import tantivy

from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy.schema import _encoded_again, build_schema, to_tantivy_json

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
]


def item(doc: dict[str, Any]) -> BulkItem:
    canonical = dumps_document(doc)
    return BulkItem(str(doc["id"]), canonical, content_hash(canonical), fields=dict(doc), sort_key=f"k{doc['id']}")


def as_tantivy_reads(body: bytes) -> dict[str, Any]:
    """The document as Tantivy's map reads it: a later key wins, and ``[]`` is no value."""
    parsed: dict[str, Any] = json.loads(body)
    return {k: v for k, v in parsed.items() if v != []}


@pytest.mark.parametrize("doc", DOCS, ids=[f"doc{d['id']}" for d in DOCS])
def test_the_spliced_document_means_what_the_dict_path_gives(doc: dict[str, Any]) -> None:
    _, plan = build_schema(MAPPING)
    fast = to_tantivy_json(item(doc), plan)
    slow = _encoded_again(item(doc), item(doc).source or b"", dict(doc), plan)
    # what the schema indexes, and the bookkeeping fields, must be the same; keys outside the
    # schema (a `[]` for a null column no field indexes) Tantivy ignores
    slow_fields = {k: v for k, v in as_tantivy_reads(slow).items() if k in MAPPING["properties"] or k.startswith("_")}
    fast_fields = {k: v for k, v in as_tantivy_reads(fast).items() if k in MAPPING["properties"] or k.startswith("_")}
    assert fast_fields == slow_fields


def test_a_nested_naive_datetime_takes_the_dict_path() -> None:
    _, plan = build_schema(MAPPING)
    body = to_tantivy_json(item(DOCS[4]), plan)
    assert b'"2022-03-04T05:06:07+00:00"' in body and b'"2022-03-04T05:06:07"' not in body


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
    assert ids("shipped_on:[2022-01-01T00:00:00Z TO 2022-01-03T00:00:00Z]") == ["2"]
    assert ids("total:[* TO *]") == []  # total: null became [] (no value), never an error
    assert ids('all_text:"already"') == ["3"] and ids("all_text:zürich") == ["1"]
    assert ids('title.keyword:"東京"') == ["6"]
