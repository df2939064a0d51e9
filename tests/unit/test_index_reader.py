"""Reading a Tantivy index back by sort key: keyset pages, key splits, fields, query, mapping.

Real Tantivy (the writer service included); keys are hostile: composite, NULL parts, the id
separator and escape inside parts, empty strings, case, unicode, NUL bytes, negative numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.errors import PermanentError, UsageError
from sparkindex.keys import document_id, sort_key
from sparkindex.targets.base import BulkItem, KeyBounds, StoredDocument
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from sparkindex.targets.tantivy import reader as tantivy_reader

TEXTS = ["", "a", "A", "a|b", "a\\", "\\N", "a\\|b", "ü", "Ü", "日本", "a b", "z", "a\x00b", "x" * 40]
NUMBERS: list[int | None] = [None, -5, 0, 7, 2**40]
MAPPING: dict[str, Any] = {
    "properties": {
        "label": {"type": "text"},
        "part": {"type": "keyword"},
        "n": {"type": "long"},
        "tags": {"type": "nested", "properties": {"t": {"type": "keyword"}}},
    }
}


def hostile_keys() -> list[tuple[str, int | None]]:
    return list(itertools.product(TEXTS, NUMBERS))


def item(key: Sequence[Any], label: str) -> BulkItem:
    doc = {"label": label, "part": key[0], "n": key[1], "tags": [{"t": str(key[1])}]}
    canonical = dumps_document(doc)
    return BulkItem(document_id(key), canonical, content_hash(canonical), fields=doc, sort_key=sort_key(key))


@pytest.fixture
def target(tmp_path: Path) -> TantivyTarget:
    return TantivyTarget(TantivyTargetConfig(root=tmp_path))


@pytest.fixture
def loaded(target: TantivyTarget) -> tuple[TantivyTarget, dict[str, str]]:
    """70 hostile documents over several commits (several segments), some rewritten (deletes
    inside segments), behind alias ``things``; returns the target and id -> sort key."""
    index = target.create_version("things", MAPPING)
    keys = hostile_keys()
    for chunk in (keys[:25], keys[25:50], keys[50:]):
        target.bulk(index, [item(k, f"first {k[0]}") for k in chunk])
    target.bulk(index, [item(k, f"second {k[0]} lamp") for k in keys[::3]])  # upserts
    target.finish_version(index)
    target.swap("things", index, None, fence=1)
    return target, {document_id(k): sort_key(k) for k in keys}


def read_all(target: TantivyTarget, size: int, key_range: KeyBounds | None = None, **kw: Any) -> list[StoredDocument]:
    out: list[StoredDocument] = []
    after = None
    while True:
        page = target.read_documents("things", key_range, after, size, **kw)
        assert len(page) <= size
        out.extend(page)
        if len(page) < size:
            return out
        after = page[-1].sort_key


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_pages_return_every_document_once_in_sort_key_order(
    loaded: tuple[TantivyTarget, dict[str, str]], size: int
) -> None:
    target, expected = loaded
    docs = read_all(target, size)
    assert [d.id for d in docs] == sorted(expected, key=expected.__getitem__)
    assert [d.sort_key for d in docs] == sorted(expected.values())
    assert all(expected[d.id] == d.sort_key for d in docs)
    for d in docs:  # the stored source and hash come back as written (the upsert's for rewritten ones)
        assert d.hash == content_hash(dumps_document(d.source))
    relabelled = {document_id(k) for k in hostile_keys()[::3]}
    assert {d.id for d in docs if d.source["label"].startswith("second")} == relabelled
    # a NULL part beside the text "\\N" (which NULL is written as inside ids); not rewritten
    null_part = next(d for d in docs if d.id == document_id(("\\N", None)))
    assert null_part.source == {"label": "first \\N", "part": "\\N", "n": None, "tags": [{"t": "None"}]}


@pytest.mark.parametrize("parts", [2, 3, 8, 200])
def test_key_splits_cut_the_index_into_ranges_covering_every_document_once(
    loaded: tuple[TantivyTarget, dict[str, str]], parts: int
) -> None:
    target, expected = loaded
    splits = target.key_splits("things", parts)
    assert splits == sorted(set(splits)) and len(splits) <= parts - 1
    assert len(splits) == min(parts - 1, len(expected) - 1)
    edges: list[str | None] = [None, *splits, None]
    slices = [read_all(target, 4, (lo, hi)) for lo, hi in itertools.pairwise(edges)]
    ids = [d.id for s in slices for d in s]
    assert sorted(ids) == sorted(expected)  # no gaps, no overlaps
    if parts <= len(expected):
        assert max(map(len, slices)) - min(map(len, slices)) <= 1  # an exact sample: even slices


def test_after_and_range_bounds_combine(loaded: tuple[TantivyTarget, dict[str, str]]) -> None:
    target, expected = loaded
    keys = sorted(expected.values())
    lo, hi = keys[10], keys[20]
    assert [d.sort_key for d in read_all(target, 3, (lo, hi))] == keys[10:20]  # lo inclusive, hi exclusive
    assert [d.sort_key for d in target.read_documents("things", (lo, hi), keys[14], 100)] == keys[15:20]
    # an `after` below the range starts at the range's first key; one beyond it reads nothing
    assert [d.sort_key for d in target.read_documents("things", (lo, hi), keys[2], 100)] == keys[10:20]
    assert target.read_documents("things", (lo, hi), keys[25], 100) == []
    assert target.read_documents("things", (hi, lo), None, 100) == []
    assert target.read_documents("things", None, None, 0) == []


def test_fields_and_query_filter(loaded: tuple[TantivyTarget, dict[str, str]]) -> None:
    target, expected = loaded
    docs = read_all(target, 5, fields=["part", "missing"])
    assert len(docs) == len(expected)
    assert all(set(d.source) == {"part"} for d in docs)
    lamps = read_all(target, 5, query="label:lamp")  # only the rewritten documents say "lamp"
    assert {d.id for d in lamps} == {document_id(k) for k in hostile_keys()[::3]}
    both = read_all(target, 2, query="lamp AND part:z")  # default fields: the text fields
    assert {d.id for d in both} == {document_id(k) for k in hostile_keys()[::3] if k[0] == "z"}
    with pytest.raises(UsageError, match="cannot parse query"):
        target.read_documents("things", query="label:(unclosed")


def test_hash_sampled_splits_on_a_larger_index(target: TantivyTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SAMPLE_SIZE documents keys are sampled by content hash; slices stay about even."""
    monkeypatch.setattr(tantivy_reader, "SAMPLE_SIZE", 300)
    index = target.create_version("things", MAPPING)
    keys = [(f"k{i:05d}", i % 7 if i % 11 else None) for i in range(3000)]
    for i in range(0, len(keys), 1000):
        target.bulk(index, [item(k, f"doc {k[0]}") for k in keys[i : i + 1000]])
    target.finish_version(index)
    target.swap("things", index, None, fence=1)
    sample = tantivy_reader.draw_sample(*target._searcher("things")[::2])
    assert 150 < len(sample.keys) < 600 and sample.every > 1
    splits = target.key_splits("things", 6)
    assert len(splits) == 5
    edges: list[str | None] = [None, *splits, None]
    slices = [read_all(target, 97, (lo, hi)) for lo, hi in itertools.pairwise(edges)]
    assert sorted(d.id for s in slices for d in s) == sorted(document_id(k) for k in keys)
    assert all(250 <= len(s) <= 750 for s in slices), [len(s) for s in slices]
    assert [d.sort_key for d in read_all(target, 64)] == sorted(sort_key(k) for k in keys)


def test_mapping_of_an_alias_and_errors(loaded: tuple[TantivyTarget, dict[str, str]]) -> None:
    target, _ = loaded
    assert target.mapping("things") == MAPPING == target.mapping("things_v1")
    with pytest.raises(PermanentError, match="does not exist"):
        target.mapping("nothing")
    with pytest.raises(PermanentError, match="does not exist"):
        target.read_documents("nothing")


def test_empty_index_reads_and_splits_nothing(target: TantivyTarget) -> None:
    index = target.create_version("things", MAPPING)
    assert target.read_documents(index) == []
    assert target.key_splits(index, 4) == []
