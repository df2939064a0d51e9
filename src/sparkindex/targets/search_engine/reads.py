"""Reading an index back: counts, hash scans, keyset pages, key splits and search.

Hash scans use scroll (every copy of a document is yielded, so verify sees duplicates, which a
keyset walk by key would skip); so do reads by id, whose hits carry each copy's ``_routing``.
Pages for reading back use ``search_after`` on the sortable key ``_key``: stateless and resumable
from any key, which is what Spark partitions and index-to-index rebuilds need.

Splitting an index into key ranges (:func:`key_splits`): indexes of up to ``split_sample``
documents are cut exactly, from all their keys; larger ones from a uniform random sample of that
many keys (``function_score``/``random_score`` with a fixed seed over ``_seq_no``, so the same
index gives the same cuts). With the default 10,000 samples, each of up to a few dozen ranges
holds its share of the documents within a few percent.

The check sums of key ranges (:func:`range_checksums`) are one ``filters`` aggregation, a bucket
per range, with ``stats`` of the check halves in each: no document is read. ``filters`` and not a
``range`` aggregation, which both engines refuse on a keyword field such as ``_key``. The checks of
a range key by key (:func:`key_checks`) are a ``composite`` aggregation over ``_key`` with the same
``stats``: ascending and paged by its ``after_key``, so a range of any size is listed in pages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

from sparkindex.checksums import CHECK_FIELDS, CHECK_HI_FIELD, CHECK_LO_FIELD, KeyCheck, RangeChecksum
from sparkindex.errors import PermanentError, SparkIndexError, UsageError
from sparkindex.targets.base import HASH_FIELD, SORT_KEY_FIELD, KeyBounds, SearchHit, StoredDocument
from sparkindex.targets.search_engine.api import EngineApi
from sparkindex.targets.search_engine.errors import HttpFailure, request_error

SPLIT_SEED = 20261122
#: Ranges summed by one request: each is a bucket (search.max_buckets is 65,535 on current
#: engines, 10,000 on older ones) and a filter clause; far below both, and a short request.
CHECKSUM_RANGES_PER_REQUEST = 500
#: the halves of the checks a bucket holds (``stats`` counts only documents with a value)
_CHECK_STATS = {"h": {"stats": {"field": CHECK_HI_FIELD}}, "l": {"stats": {"field": CHECK_LO_FIELD}}}


def count(api: EngineApi, name: str) -> int:
    found = api.call("POST", f"/{quote(name)}/_count", f"counting documents of {name!r}")
    return int(found["count"])


def key_range_filter(key_range: KeyBounds | None, after: str | None = None) -> list[dict[str, Any]]:
    bounds: dict[str, str] = {}
    if key_range is not None:
        lo, hi = key_range
        if lo is not None:
            bounds["gte"] = lo
        if hi is not None:
            bounds["lt"] = hi
    if after is not None and (bounds.get("gte") is None or after >= bounds["gte"]):
        bounds.pop("gte", None)
        bounds["gt"] = after
    return [{"range": {SORT_KEY_FIELD: bounds}}] if bounds else []


def scan_hashes(
    api: EngineApi,
    name: str,
    ids: Sequence[str] | None,
    key_range: KeyBounds | None,
    page: int,
    keep_alive: str,
) -> Iterator[tuple[str, str]]:
    filters = key_range_filter(key_range)
    what = f"scanning hashes of {name!r}"
    if ids is None:
        hits = _scroll(api, name, filters, page, keep_alive, [HASH_FIELD], what)
    else:
        hits = _by_ids(api, name, ids, filters, page, keep_alive, [HASH_FIELD], what)
    for hit in hits:
        yield hit["_id"], str((hit.get("_source") or {}).get(HASH_FIELD) or "")


def documents_by_id(
    api: EngineApi, name: str, ids: Sequence[str], fields: Sequence[str] | None, page: int, keep_alive: str
) -> Iterator[StoredDocument]:
    """Every copy of the documents with *ids*: an ``ids`` query, which every shard answers (a
    ``GET`` by id would look on the shard of the id's hash only), each hit with its ``_routing``."""
    source: Any = True if fields is None else [*fields, SORT_KEY_FIELD, HASH_FIELD]
    what = f"reading documents of {name!r} by id"
    for hit in _by_ids(api, name, ids, [], page, keep_alive, source, what):
        yield _stored(hit)


def count_hash_prefix(api: EngineApi, name: str, prefix: str) -> int:
    body = {"query": {"prefix": {HASH_FIELD: prefix}}}
    found = api.call("POST", f"/{quote(name)}/_count", f"counting documents of {name!r} by hash", body)
    return int(found["count"])


def _by_ids(
    api: EngineApi,
    name: str,
    ids: Sequence[str],
    filters: list[dict[str, Any]],
    page: int,
    keep_alive: str,
    source: Any,
    what: str,
) -> Iterator[dict[str, Any]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), page):
        chunk = [{"ids": {"values": unique[start : start + page]}}, *filters]
        yield from _scroll(api, name, chunk, page, keep_alive, source, what)


def _scroll(
    api: EngineApi, name: str, filters: list[dict[str, Any]], page: int, keep_alive: str, source: Any, what: str
) -> Iterator[dict[str, Any]]:
    """Every hit of the filters (each copy of a document stored twice, too), page by page."""
    query = {"bool": {"filter": filters}} if filters else {"match_all": {}}
    body = {"size": page, "sort": ["_doc"], "_source": source, "query": query}
    found = api.call("POST", f"/{quote(name)}/_search", what, body, params={"scroll": keep_alive})
    scroll_id = found.get("_scroll_id")
    try:
        while True:
            hits = found["hits"]["hits"]
            yield from hits
            if len(hits) < page or not scroll_id:
                return
            found = api.call("POST", "/_search/scroll", what, {"scroll": keep_alive, "scroll_id": scroll_id})
            scroll_id = found.get("_scroll_id", scroll_id)
    finally:
        if scroll_id:
            with contextlib.suppress(HttpFailure, SparkIndexError):  # expires by itself anyway
                api.raw("DELETE", "/_search/scroll", {"scroll_id": [scroll_id]})


def read_documents(
    api: EngineApi,
    name: str,
    key_range: KeyBounds | None,
    after: str | None,
    size: int,
    fields: Sequence[str] | None,
    query: str | None = None,
) -> list[StoredDocument]:
    """A keyset page; *query* in the engine's query-string syntax filters it (a query the
    engine cannot parse is the user's to fix: :class:`UsageError`)."""
    filters = key_range_filter(key_range, after)
    if query is not None and query.strip():
        filters.append({"query_string": {"query": query}})
    body: dict[str, Any] = {
        "size": size,
        "sort": [{SORT_KEY_FIELD: "asc"}],
        "query": {"bool": {"filter": filters}} if filters else {"match_all": {}},
    }
    if fields is not None:
        body["_source"] = {"includes": [*fields, SORT_KEY_FIELD, HASH_FIELD]}
    found = _search(api, name, body, query, f"reading documents of {name!r}")
    return [_stored(hit) for hit in found["hits"]["hits"]]


def _search(api: EngineApi, name: str, body: dict[str, Any], query: str | None, what: str) -> Any:
    try:
        return api.raw("POST", f"/{quote(name)}/_search", body)
    except HttpFailure as failure:
        if failure.status == 400 and query:
            raise UsageError(f"cannot run query {query!r} on {name!r}: {failure.reason}") from None
        raise request_error(failure, what, api.where) from None


def _stored(hit: dict[str, Any]) -> StoredDocument:
    source = dict(hit.get("_source") or {})
    sort_key = source.pop(SORT_KEY_FIELD, None)
    doc_hash = source.pop(HASH_FIELD, None)
    for name in CHECK_FIELDS:  # bookkeeping like _key and _hash: not the document's own fields
        source.pop(name, None)
    routing = hit.get("_routing")
    return StoredDocument(hit["_id"], sort_key, doc_hash, source, None if routing is None else str(routing))


def key_splits(api: EngineApi, name: str, parts: int, sample: int) -> list[str]:
    if parts < 2:
        return []
    total = count(api, name)
    if total == 0:
        return []
    if total <= sample:
        keys = _all_keys(api, name, sample)
    else:
        body = {
            "size": sample,
            "_source": [SORT_KEY_FIELD],
            "query": {
                "function_score": {
                    "query": {"exists": {"field": SORT_KEY_FIELD}},
                    "random_score": {"seed": SPLIT_SEED, "field": "_seq_no"},
                    "boost_mode": "replace",
                }
            },
        }
        found = api.call("POST", f"/{quote(name)}/_search", f"sampling sort keys of {name!r}", body)
        keys = sorted(k for hit in found["hits"]["hits"] if (k := (hit.get("_source") or {}).get(SORT_KEY_FIELD)))
    cuts: list[str] = []
    for i in range(1, parts):
        key = keys[len(keys) * i // parts] if keys else None
        if key is not None and (not cuts or key > cuts[-1]) and key > keys[0]:
            cuts.append(key)
    return cuts


def _all_keys(api: EngineApi, name: str, limit: int) -> list[str]:
    keys: list[str] = []
    after: str | None = None
    while True:
        page = read_documents(api, name, None, after, min(limit, 10_000), [])
        keys.extend(d.sort_key for d in page if d.sort_key is not None)
        if len(page) < min(limit, 10_000) or not page or page[-1].sort_key is None:
            return keys
        after = page[-1].sort_key


def search(api: EngineApi, name: str, query: str, limit: int, fields: list[str]) -> list[SearchHit]:
    if query.strip():
        q: dict[str, Any] = {"simple_query_string": {"query": query, "fields": fields or ["*"]}}
    else:
        q = {"match_all": {}}
    found = _search(api, name, {"size": limit, "query": q}, query, f"searching {name!r}")
    out = []
    for hit in found["hits"]["hits"]:
        doc = _stored(hit)
        out.append(SearchHit(doc.id, float(hit.get("_score") or 0.0), doc.source))
    return out


def mapping_of(api: EngineApi, name: str) -> dict[str, Any]:
    """The mapping of *name* (an index, or the index behind an alias)."""
    found = api.call("GET", f"/{quote(name)}/_mapping", f"reading the mapping of {name!r}")
    if not found:
        raise PermanentError(f"index {name!r} has no mapping")
    return dict(next(iter(found.values())).get("mappings") or {})


def mapping_if_exists(api: EngineApi, name: str) -> dict[str, Any] | None:
    """The mapping of *name* (an index, or the index behind an alias), or None if there is none."""
    found = api.call("GET", f"/{quote(name)}/_mapping", f"reading the mapping of {name!r}", missing_ok=True)
    if not found:
        return None
    return dict(next(iter(found.values())).get("mappings") or {})


def range_checksums(api: EngineApi, name: str, ranges: Sequence[KeyBounds]) -> list[RangeChecksum]:
    """The count and check sums of each range of *name*, in order (see module doc). ``stats``
    counts only documents with a value, so those without a check are in no figure; its sums are
    doubles, exact for sums of 32-bit halves below 2**53 (:mod:`sparkindex.checksums`)."""
    out: list[RangeChecksum] = []
    for start in range(0, len(ranges), CHECKSUM_RANGES_PER_REQUEST):
        chunk = ranges[start : start + CHECKSUM_RANGES_PER_REQUEST]
        filters = {str(i): _range_query(bounds) for i, bounds in enumerate(chunk)}
        body = {"size": 0, "aggs": {"r": {"filters": {"filters": filters}, "aggs": _CHECK_STATS}}}
        found = api.call("POST", f"/{quote(name)}/_search", f"summing the checks of key ranges of {name!r}", body)
        buckets = found["aggregations"]["r"]["buckets"]
        for i in range(len(chunk)):
            bucket = buckets[str(i)]
            checked, hi, lo = _sums(bucket)
            out.append(RangeChecksum(checked, hi, lo, unchecked=int(bucket["doc_count"]) - checked))
    return out


def key_checks(api: EngineApi, name: str, key_range: KeyBounds, page: int) -> Iterator[KeyCheck]:
    """Every sort key of *key_range* in *name*, ascending, with its documents' checks (see module
    doc), *page* keys per request."""
    filters = key_range_filter(key_range)
    query = {"bool": {"filter": filters}} if filters else {"match_all": {}}
    composite: dict[str, Any] = {"size": page, "sources": [{"k": {"terms": {"field": SORT_KEY_FIELD}}}]}
    while True:
        body = {"size": 0, "query": query, "aggs": {"keys": {"composite": composite, "aggs": _CHECK_STATS}}}
        found = api.call("POST", f"/{quote(name)}/_search", f"listing the checks of a key range of {name!r}", body)
        keys = found["aggregations"]["keys"]
        for bucket in keys["buckets"]:
            checked, hi, lo = _sums(bucket)
            yield KeyCheck(str(bucket["key"]["k"]), int(bucket["doc_count"]), checked, hi, lo)
        after = keys.get("after_key")
        if len(keys["buckets"]) < page or not after:
            return
        composite = {**composite, "after": after}


def _sums(bucket: dict[str, Any]) -> tuple[int, int, int]:
    """(documents with a check, sum of high halves, sum of low halves) of a bucket: the sums come
    back as doubles, exact for these magnitudes (:mod:`sparkindex.checksums`)."""
    hi, lo = bucket["h"], bucket["l"]
    return int(hi["count"]), round(float(hi["sum"] or 0)), round(float(lo["sum"] or 0))


def _range_query(bounds: KeyBounds) -> dict[str, Any]:
    found = key_range_filter(bounds)
    return found[0] if found else {"match_all": {}}
