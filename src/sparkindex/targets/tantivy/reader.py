"""Reading a Tantivy index back in sort-key order: keyset pages and key splits (and by id:
every copy of some documents, and a count by hash prefix, for soft deletes; and for verify, the
check sums of key ranges and the checks of a range key by key, windowed by the same sample).

Why not ``searcher.search(..., order_by_field="_key")``: ordering by a text fast field turns every
matching key into a string, so each page costs as much as the rest of the range (measured on
100k documents: paging 1,000 at a time took 7.8 s, one full sort 3.4 s). A terms aggregation
ordered by key works on term ordinals (the first 1,000 of 100k keys in 22 ms), and each page asks
only for a window of keys that a sample says holds about twice a page, so reading a slice costs
time linear in its size, not quadratic. The sample is drawn by content hash, which is uniform
and unrelated to the key, so it also gives :func:`key_splits` ranges of about equal size.

tantivy-py quirks this module works around: ``Query.range_query`` takes no text fields (the query
parser does, and sort keys are hex, always one plain token); ``_key:[* TO *]`` matches nothing;
a search with limit 0 panics; aggregations refuse more than 65,000 buckets.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import tantivy

from sparkindex.checksums import CHECK_HI_FIELD, CHECK_LO_FIELD, KeyCheck, RangeChecksum
from sparkindex.errors import UsageError
from sparkindex.targets.base import HASH_FIELD, SORT_KEY_FIELD, KeyBounds, StoredDocument

#: Keys kept in a sample (below tantivy's limit of 65,000 aggregation buckets, with room for
#: the sampling's spread).
SAMPLE_SIZE = 50_000
AGG_BUCKET_LIMIT = 65_000
#: A page's window holds about this many times the keys still wanted.
WINDOW_FACTOR = 2.0
HEX_DIGITS = 8  # precision of the hash bound that draws the sample
#: Keys per aggregation when listing the checks of a range key by key.
KEY_CHECKS_PAGE = 10_000
#: the halves of the checks a bucket holds (``stats`` counts only documents with a value)
_CHECK_STATS = {"h": {"stats": {"field": CHECK_HI_FIELD}}, "l": {"stats": {"field": CHECK_LO_FIELD}}}


@dataclass(frozen=True)
class KeySample:
    """Sorted sort keys of about every ``every``-th document (every one when ``every`` is 1)."""

    keys: list[str]
    every: float

    def bound_after(self, start: str | None, wanted: int) -> str | None:
        """A sampled key about ``WINDOW_FACTOR * wanted`` documents above *start*; None if the
        sample ends first (the window is then open-ended)."""
        i = 0 if start is None else bisect.bisect_right(self.keys, start)
        j = i + max(1, math.ceil(WINDOW_FACTOR * wanted / self.every))
        return self.keys[j] if j < len(self.keys) else None


def _and(queries: Sequence[tantivy.Query | None]) -> tantivy.Query:
    present = [q for q in queries if q is not None]
    if not present:
        return tantivy.Query.all_query()
    if len(present) == 1:
        return present[0]
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in present])


def key_window(idx: tantivy.Index, start: str | None, start_inclusive: bool, end: str | None) -> tantivy.Query | None:
    """Documents whose sort key is above (or from) *start* and below *end*; None: every document."""
    if start is None and end is None:
        return None
    left = "[*" if start is None else ("[" if start_inclusive else "{") + start
    right = "*]" if end is None else end + "}"
    return idx.parse_query(f"{SORT_KEY_FIELD}:{left} TO {right}", [SORT_KEY_FIELD])


def parse_filter(idx: tantivy.Index, query: str | None, default_fields: list[str]) -> tantivy.Query | None:
    """The caller's query (Tantivy's query-parser syntax), or None when there is none."""
    if query is None or not query.strip():
        return None
    try:
        return idx.parse_query(query, default_fields or [SORT_KEY_FIELD])
    except ValueError as exc:
        raise UsageError(f"cannot parse query {query!r}: {exc}") from None


def keys_in(searcher: Any, query: tantivy.Query, size: int) -> list[tuple[str, int]]:
    """The first *size* distinct sort keys among the documents *query* matches, ascending, with
    how many documents hold each (more than one: an id stored twice)."""
    agg = {"k": {"terms": {"field": SORT_KEY_FIELD, "size": size, "order": {"_key": "asc"}}}}
    buckets = searcher.aggregate(query, agg)["k"]["buckets"]
    return [(b["key"], int(b["doc_count"])) for b in buckets]


def draw_sample(idx: tantivy.Index, searcher: Any) -> KeySample:
    """Every key of a small index; of a large one, the keys of the documents whose content hash
    falls in the lowest ``SAMPLE_SIZE / num_docs`` of the hash space (a uniform draw)."""
    total = int(searcher.num_docs)
    if total <= SAMPLE_SIZE:
        return KeySample([k for k, _ in keys_in(searcher, tantivy.Query.all_query(), max(1, total))], 1.0)
    fraction = SAMPLE_SIZE / total
    while True:
        bound = f"{min(16**HEX_DIGITS - 1, math.ceil(fraction * 16**HEX_DIGITS)):0{HEX_DIGITS}x}"
        drawn = idx.parse_query(f"{HASH_FIELD}:[* TO {bound}}}", [HASH_FIELD])
        try:
            keys = [k for k, _ in keys_in(searcher, drawn, AGG_BUCKET_LIMIT)]
        except ValueError:  # hashes cluster (identical documents): draw fewer
            fraction /= 2
            continue
        if keys:
            return KeySample(keys, total / len(keys))
        return KeySample([k for k, _ in keys_in(searcher, tantivy.Query.all_query(), SAMPLE_SIZE)], 1.0)


def split_points(sample: KeySample, parts: int) -> list[str]:
    """Up to ``parts - 1`` ascending sampled keys that cut the index into about equal ranges."""
    keys = sample.keys
    if parts <= 1 or not keys:
        return []
    cuts = [keys[len(keys) * i // parts] for i in range(1, parts)]
    return [k for i, k in enumerate(cuts) if k != keys[0] and (i == 0 or k != cuts[i - 1])]


def page_keys(
    idx: tantivy.Index,
    searcher: Any,
    sample: KeySample,
    key_range: KeyBounds | None,
    after: str | None,
    size: int,
    where: tantivy.Query | None,
) -> list[tuple[str, int]]:
    """The next *size* keys of *key_range* above *after* that *where* matches, window by window."""
    lo, hi = key_range or (None, None)
    start: str | None
    if after is not None and (lo is None or after >= lo):
        start, inclusive = after, False
    else:
        start, inclusive = lo, True
    if hi is not None and start is not None and start >= hi:
        return []
    found: list[tuple[str, int]] = []
    while len(found) < size:
        wanted = size - len(found)
        end = sample.bound_after(start, wanted)
        last = end is None or (hi is not None and end >= hi)
        if last:
            end = hi
        window = _and([key_window(idx, start, inclusive, end), where])
        found.extend(keys_in(searcher, window, min(wanted, AGG_BUCKET_LIMIT)))
        if last:
            break
        start, inclusive = end, True
    return found


def fetch(
    idx: tantivy.Index,
    searcher: Any,
    keys: Sequence[tuple[str, int]],
    fields: Sequence[str] | None,
    where: tantivy.Query | None,
) -> list[StoredDocument]:
    """The stored documents holding *keys*, in key order, their sources cut to *fields*."""
    if not keys:
        return []
    by_key = tantivy.Query.term_set_query(idx.schema, SORT_KEY_FIELD, [k for k, _ in keys])
    hits = searcher.search(_and([by_key, where]), sum(n for _, n in keys), count=False).hits
    keep = None if fields is None else set(fields)
    out = []
    for _, addr in hits:
        doc = searcher.doc(addr)
        source = orjson.loads(doc["_source"][0])
        if keep is not None:
            source = {k: v for k, v in source.items() if k in keep}
        hashes = doc[HASH_FIELD]
        out.append(StoredDocument(doc["_id"][0], doc[SORT_KEY_FIELD][0], hashes[0] if hashes else None, source))
    out.sort(key=lambda d: d.sort_key or "")
    return out


def by_ids(
    searcher: Any, schema: tantivy.Schema, ids: Sequence[str], fields: Sequence[str] | None
) -> list[StoredDocument]:
    """Every stored copy of the documents with *ids* (Tantivy has no routing: None), sources cut
    to *fields*: what a soft delete rewrites as a tombstone."""
    wanted = list(dict.fromkeys(ids))
    total = int(searcher.num_docs)
    if not wanted or total == 0:
        return []
    query = tantivy.Query.term_set_query(schema, "_id", wanted)
    keep = None if fields is None else set(fields)
    out = []
    for _, addr in searcher.search(query, total, count=False).hits:
        doc = searcher.doc(addr)
        source = orjson.loads(doc["_source"][0])
        if keep is not None:
            source = {k: v for k, v in source.items() if k in keep}
        keys, hashes = doc[SORT_KEY_FIELD], doc[HASH_FIELD]
        out.append(StoredDocument(doc["_id"][0], keys[0] if keys else None, hashes[0] if hashes else None, source))
    return out


def range_checksum(searcher: Any, query: tantivy.Query) -> RangeChecksum:
    """The count and check sums of the documents *query* matches that store a check: ``stats``
    counts only documents with a value, and sums in doubles, exact below 2**53 (the halves are
    32 bits wide for that; see :mod:`sparkindex.checksums`)."""
    checked, hi, lo = _sums(searcher.aggregate(query, _CHECK_STATS))
    docs = int(searcher.search(query, 1, count=True).count)  # a limit of 0 panics
    return RangeChecksum(checked, hi, lo, unchecked=docs - checked)


def key_checks(idx: tantivy.Index, searcher: Any, sample: KeySample, key_range: KeyBounds) -> Iterator[KeyCheck]:
    """Every sort key of *key_range*, ascending, with its documents' checks: a terms aggregation
    ordered by key with the ``stats`` of the halves under each, window by window as
    :func:`page_keys` reads (a window the sample says holds about two pages, so that listing a
    range costs time linear in its size), page by page within a window that holds more."""
    lo, hi = key_range
    if lo is not None and hi is not None and lo >= hi:
        return
    start, inclusive = lo, True
    terms = {"field": SORT_KEY_FIELD, "size": KEY_CHECKS_PAGE, "order": {"_key": "asc"}}
    agg: dict[str, Any] = {"k": {"terms": terms, "aggs": _CHECK_STATS}}
    while True:
        end = sample.bound_after(start, KEY_CHECKS_PAGE)
        last = end is None or (hi is not None and end >= hi)
        if last:
            end = hi
        buckets = searcher.aggregate(_and([key_window(idx, start, inclusive, end)]), agg)["k"]["buckets"]
        for bucket in buckets:
            yield KeyCheck(str(bucket["key"]), int(bucket["doc_count"]), *_sums(bucket))
        if len(buckets) >= KEY_CHECKS_PAGE:  # the window holds more than a page: on within it
            start, inclusive = str(buckets[-1]["key"]), False
        elif last:
            return
        else:
            start, inclusive = end, True


def _sums(found: dict[str, Any]) -> tuple[int, int, int]:
    """(documents with a check, sum of high halves, sum of low halves): Tantivy sums in doubles,
    exact for these magnitudes (:mod:`sparkindex.checksums`)."""
    hi, lo = found["h"], found["l"]
    return int(hi["count"]), round(float(hi["sum"] or 0)), round(float(lo["sum"] or 0))


def count_hash_prefix(searcher: Any, schema: tantivy.Schema, prefix: str) -> int:
    """Documents whose content hash begins with *prefix* (``_hash`` is one raw term each)."""
    query = tantivy.Query.regex_query(schema, HASH_FIELD, re.escape(prefix) + ".*")
    return int(searcher.search(query, 1, count=True).count)  # a limit of 0 panics
