"""What the search-engine targets send and how they read the answers: index bodies (mapping,
settings) and ``_bulk`` lines, built and classified without a server."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from sparkindex.checksums import check_halves
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.errors import ConfigError
from sparkindex.keys import sort_key
from sparkindex.targets.base import BulkItem
from sparkindex.targets.search_engine.bulk import EncodedItem, chunks, encode_item, item_result, with_key_and_hash
from sparkindex.targets.search_engine.mapping import (
    DATE_FORMAT,
    creation_settings,
    declares_checks,
    index_mapping,
    normalize_settings,
    restored_settings,
    text_fields,
)

PLANNED: dict[str, Any] = {
    "properties": {
        "name": {
            "type": "text",
            "analyzer": "english",
            "copy_to": ["all_text"],
            "fields": {"keyword": {"type": "keyword", "ignore_above": 256}},
        },
        "all_text": {"type": "text"},
        "secret_note": {"type": "text", "index": False},
        "created_at": {"type": "date"},
        "category": {"type": "object", "properties": {"title": {"type": "text"}, "since": {"type": "date"}}},
        "reviews": {"type": "nested", "properties": {"body": {"type": "text"}, "stars": {"type": "long"}}},
    }
}


def test_mapping_completed_for_the_engine() -> None:
    body = index_mapping(PLANNED, "shop_v1", {"alias": "shop"})
    props = body["properties"]
    assert body["dynamic"] == "strict"
    assert props["_key"] == {"type": "keyword"} and props["_hash"] == {"type": "keyword"}
    # summed by aggregations (doc values), never searched (no index)
    assert props["_check_hi"] == props["_check_lo"] == {"type": "long", "index": False}
    assert declares_checks(body) and not declares_checks(PLANNED)
    assert props["name"] == {**PLANNED["properties"]["name"]}  # analyzer, copy_to, sub-field kept
    assert props["secret_note"]["index"] is False
    assert props["created_at"]["format"] == DATE_FORMAT
    assert props["category"]["properties"]["since"]["format"] == DATE_FORMAT
    assert props["reviews"]["type"] == "nested" and props["reviews"]["properties"]["stars"] == {"type": "long"}
    assert body["_meta"] == {"sparkindex": {"alias": "shop"}}
    assert "format" not in PLANNED["properties"]["created_at"]  # the planner's mapping is not changed


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"properties": {"_key": {"type": "keyword"}}}, "clash"),
        ({"properties": {"_check_lo": {"type": "long"}}}, "clash"),
        ({"properties": {"x": {"type": "strnig"}}}, "field 'x' has unknown type 'strnig'"),
        ({"properties": {"x": {"type": "long", "properties": {}}}}, "cannot have properties"),
        ({"properties": {"o": {"properties": {"y": "text"}}}}, "field 'o.y' must be an object"),
        ({}, "no 'properties'"),
    ],
)
def test_bad_mappings_name_index_and_field(mapping: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=f"index 'shop_v1'.*{message}"):
        index_mapping(mapping, "shop_v1", {})


def test_text_fields_are_searchable_text_outside_nested() -> None:
    assert text_fields(PLANNED) == ["name", "all_text", "category.title"]


def test_settings_in_every_form_normalise_alike() -> None:
    nested = {"number_of_shards": 2, "analysis": {"analyzer": {"folded": {"tokenizer": "standard"}}}}
    flat = {"index.number_of_shards": 2, "index.analysis.analyzer.folded.tokenizer": "standard"}
    under_index = {"index": {"number_of_shards": 2, "analysis.analyzer.folded.tokenizer": "standard"}}
    assert normalize_settings(nested, "s") == normalize_settings(flat, "s") == normalize_settings(under_index, "s")
    with pytest.raises(ConfigError, match=re.escape("indexes[0].settings.index.number_of_shards: given twice")):
        normalize_settings({"number_of_shards": 1, "index.number_of_shards": 2}, "indexes[0].settings")


def test_bulk_load_settings_over_the_users_and_restored_after() -> None:
    user = {"number_of_replicas": 2, "refresh_interval": "5s", "number_of_shards": 3}
    assert creation_settings(user) == {
        "index": {"number_of_replicas": 0, "refresh_interval": "-1", "number_of_shards": 3}
    }
    assert restored_settings(user) == {"index": {"refresh_interval": "5s", "number_of_replicas": 2}}
    assert restored_settings({}) == {"index": {"refresh_interval": None, "number_of_replicas": None}}


def item(doc: dict[str, Any], **kw: Any) -> BulkItem:
    source = dumps_document(doc)
    return BulkItem("7", source, content_hash(source), sort_key=sort_key([7]), **kw)


def test_key_and_hash_are_spliced_into_the_body() -> None:
    doc = {"b": [1, {"c": "d"}], "a": 'x"y'}
    it = item(doc, version=12, routing="p1")
    action, body, end = encode_item(it).lines.split(b"\n")
    assert orjson.loads(action) == {
        "index": {"_id": "7", "version": 12, "version_type": "external_gte", "routing": "p1"}
    }
    assert orjson.loads(body) == {**doc, "_key": it.sort_key, "_hash": it.hash}
    assert end == b""
    assert orjson.loads(with_key_and_hash(b"{}", "0a", "h")) == {"_key": "0a", "_hash": "h"}
    assert orjson.loads(with_key_and_hash(b' { "a":1}', None, "h")) == {"a": 1, "_hash": "h"}


def test_the_check_halves_are_spliced_only_where_the_index_declares_them() -> None:
    doc = {"a": 1}
    check = 2**64 - 2
    _, body, _ = encode_item(item(doc, check=check), checks=True).lines.split(b"\n")
    hi, lo = check_halves(check)
    assert (hi, lo) == (2**32 - 1, 2**32 - 2)
    spliced = {"_key": sort_key([7]), "_hash": item(doc).hash, "_check_hi": hi, "_check_lo": lo}
    assert orjson.loads(body) == {**doc, **spliced}
    for sent in (encode_item(item(doc, check=check)), encode_item(item(doc), checks=True)):
        assert b"_check" not in sent.lines  # an index from before checks; an item without one
    assert orjson.loads(with_key_and_hash(b"{}", None, None, 5)) == {"_check_hi": 0, "_check_lo": 5}


def test_items_the_engine_would_fail_the_whole_request_for_are_refused_alone() -> None:
    assert "longer than 512 bytes" in (encode_item(BulkItem("x" * 513, b"{}")).error or "")
    assert encode_item(BulkItem("é" * 256, b"{}")).error is None  # 512 bytes exactly
    assert "outside" in (encode_item(BulkItem("a", b"{}", version=-1)).error or "")
    assert "outside" in (encode_item(BulkItem("a", op="delete", version=2**63)).error or "")


def test_deletes_and_bodiless_items() -> None:
    assert encode_item(BulkItem("a|b", op="delete", version=3)).lines == (
        b'{"delete":{"_id":"a|b","version":3,"version_type":"external_gte"}}\n'
    )
    assert encode_item(BulkItem("x")).error == "no document body to index"


def test_chunks_split_by_count_and_bytes() -> None:
    encoded = [EncodedItem(b"x" * n) for n in (10, 10, 10, 50, 10, 200, 10)]
    assert list(chunks(encoded, max_docs=2, max_bytes=1000)) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert list(chunks(encoded, max_docs=100, max_bytes=60)) == [(0, 3), (3, 5), (5, 6), (6, 7)]
    assert list(chunks([], 10, 10)) == []


def answer(status: int, error: dict[str, Any] | None = None, op: str = "index", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"_id": "7", "status": status, **extra}
    if error is not None:
        body["error"] = error
    return {op: body}


VERSION_CONFLICT = {"type": "version_conflict_engine_exception", "reason": "[7]: version conflict"}


@pytest.mark.parametrize(
    ("it", "ans", "expected"),
    [
        (BulkItem("7", b"{}"), answer(201), (True, False, None)),
        (BulkItem("7", b"{}"), answer(200), (True, False, None)),
        (BulkItem("7", op="delete"), answer(404, result="not_found"), (True, False, None)),
        (BulkItem("7", b"{}", version=3), answer(409, VERSION_CONFLICT), (True, False, None)),
        (BulkItem("7", b"{}"), answer(409, VERSION_CONFLICT), (False, False, "version_conflict_engine_exception")),
        (
            BulkItem("7", b"{}"),
            answer(429, {"type": "es_rejected_execution_exception", "reason": "queue full"}),
            (False, True, "es_rejected_execution_exception"),
        ),
        (
            BulkItem("7", b"{}"),
            answer(503, {"type": "unavailable_shards_exception"}),
            (False, True, "unavailable_shards_exception"),
        ),
        (BulkItem("7", b"{}"), answer(504, {"type": "timeout"}), (False, True, "timeout")),
        (
            BulkItem("7", b"{}"),
            answer(
                400,
                {
                    "type": "mapper_parsing_exception",
                    "reason": "failed to parse [n]",
                    "caused_by": {"type": "x", "reason": "For input string"},
                },
            ),
            (False, False, "mapper_parsing_exception"),
        ),
        (
            BulkItem("7", b"{}"),
            answer(400, {"type": "strict_dynamic_mapping_exception"}),
            (False, False, "strict_dynamic_mapping_exception"),
        ),
    ],
)
def test_item_answers_classified(it: BulkItem, ans: dict[str, Any], expected: tuple[bool, bool, str | None]) -> None:
    result = item_result(it, ans)
    assert (result.ok, result.transient, result.error_class) == expected
    if not result.ok:
        assert result.error and str(ans[next(iter(ans))]["status"]) in result.error


def test_a_rejection_says_why_with_its_cause() -> None:
    err = {
        "type": "mapper_parsing_exception",
        "reason": "failed to parse [n]",
        "caused_by": {"type": "nfe", "reason": "For input string: x"},
    }
    result = item_result(BulkItem("7", b"{}"), answer(400, err))
    assert result.error == "400 mapper_parsing_exception: failed to parse [n] (caused by nfe: For input string: x)"
