"""An index as a reindex source: partitions from key splits, pages through the index-source
builder, id lookups, and the plan and mapping of a rebuild. Real Tantivy, hostile keys."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config.indexes import IndexConfig
from sparkindex.documents.builder import make_builder
from sparkindex.documents.from_index import IndexDocumentBuilder, resolve_index_source
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.errors import ConfigError, PermanentError
from sparkindex.index_source.source import IndexSource, page_bounds
from sparkindex.keys import document_id, dump_key, load_key, sort_key
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

TEXTS = ["", "a", "A", "a|b", "b\\", "\\N", "ü", "日本", "x\x00y", "Zz"]
NUMBERS: list[int | None] = [None, -7, 0, 3, 2**40]
MAPPING: dict[str, Any] = {
    "properties": {
        "label": {"type": "text", "analyzer": "english", "copy_to": ["everything"]},
        "part": {"type": "keyword"},
        "n": {"type": "long"},
        "everything": {"type": "text"},
    },
    "dynamic": "strict",
}


@pytest.fixture
def source(tmp_path: Path) -> IndexSource:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path))
    index = target.create_version("things", MAPPING)
    items = []
    for a, b in itertools.product(TEXTS, NUMBERS):
        doc = {"label": f"lamps of {a}", "part": a, "n": b}
        raw = dumps_document(doc)
        items.append(BulkItem(document_id((a, b)), raw, content_hash(raw), fields=doc, sort_key=sort_key((a, b))))
    target.bulk(index, items[:20])
    target.bulk(index, items[20:])
    target.finish_version(index)
    target.swap("things", index, None, fence=1)
    opened = open_source_url(f"tantivy://{tmp_path}")
    assert isinstance(opened, IndexSource)
    return opened


def config(**kw: Any) -> IndexConfig:
    return IndexConfig.model_validate({"alias": "rebuilt", "table": "things", **kw})


def test_page_bounds_translate_partition_ranges_to_key_bounds() -> None:
    assert page_bounds(KeyRange(None, None), None) == (None, None)
    assert page_bounds(KeyRange(("0a",), ("0f",)), None) == ((None, "0f0"), "0a")
    assert page_bounds(KeyRange(("0a",), None), ("0c",)) == (None, "0c")  # the cursor wins over the start
    # no hex key lies between "0f" and "0f0": (after, upto] is exactly [.., upto + "0")
    assert "0f" < "0f0" < "0f00" and "0e" + "f" * 30 < "0f0"


@pytest.mark.parametrize(("partition_size", "page_size"), [(7, 3), (10, 50), (1000, 4)])
def test_partitions_and_pages_read_every_document_once(
    source: IndexSource, partition_size: int, page_size: int
) -> None:
    cfg = config(partition_size=partition_size, page_size=page_size)
    plan, _ = resolve_index_source(source, cfg, "p.yaml: indexes[0]")
    builder = make_builder(source, plan)
    assert isinstance(builder, IndexDocumentBuilder)
    ranges = source.split_keys(plan.table, plan.id_columns, partition_size, 1000)
    total = len(TEXTS) * len(NUMBERS)
    assert len(ranges) == (1 if partition_size >= total else -(-total // partition_size))
    seen: list[str] = []
    for rng in ranges:
        # ranges travel through the coordination store as JSON, cursors too
        rng = KeyRange(load_key(dump_key(rng.after)), load_key(dump_key(rng.upto)))
        after = None
        while True:
            page = builder.page(rng, after, page_size)
            assert page.rows == len(page.docs) and not page.failures
            seen.extend(d.id for d in page.docs)
            for d in page.docs:  # ids and sort keys kept, hashes recomputed over the same source
                assert d.sort_key == sort_key(((d.fields or {})["part"], (d.fields or {})["n"]))
                assert d.hash == content_hash(d.source)
            if page.rows < page_size:
                break
            after = load_key(dump_key(page.last_key))
    assert sorted(seen) == sorted(document_id(k) for k in itertools.product(TEXTS, NUMBERS))


def test_plan_and_mapping_of_a_rebuild(source: IndexSource) -> None:
    cfg = config(fields={"label": {"analyzer": "standard"}}, mapping={"dynamic": False})
    plan, mapping = resolve_index_source(source, cfg, "w")
    assert plan.id_columns == ["_id"] and plan.emit == ["label", "part", "n"] and plan.relations == []
    assert plan.table.primary_key == ("_id",) and source.count(plan.table) == len(TEXTS) * len(NUMBERS)
    assert mapping == {
        "dynamic": False,  # the pipeline's root option wins over the source index's
        "properties": {
            "label": {"type": "text", "analyzer": "standard", "copy_to": ["everything"]},
            "part": {"type": "keyword"},
            "n": {"type": "long"},
            "everything": {"type": "text"},
        },
    }
    slim, slim_mapping = resolve_index_source(source, config(columns=["part"]), "w")
    assert slim.emit == ["part"] and slim_mapping == {"dynamic": "strict", "properties": {"part": {"type": "keyword"}}}
    docs = make_builder(source, slim).page(KeyRange(None, None), None, 5).docs
    assert [set(d.fields or {}) for d in docs] == [{"part"}] * 5


def test_ids_are_looked_up_in_the_index(source: IndexSource) -> None:
    info = source.table("things")
    pipe, null = document_id(("a|b", None)), document_id(("\\N", None))  # escaped separators, NULL parts
    wanted = [(pipe,), (null,), ("a|b",), (pipe,)]  # "a|b" alone is no document's id
    assert source.fetch_where_in(info, ["_id"], wanted, ["_id"], ["_id"]) == sorted([(pipe,), (null,)])
    assert source.fetch_where_in(info, ["_id"], [], ["_id"], ["_id"]) == []
    with pytest.raises(PermanentError, match="only be looked up by '_id'"):
        source.fetch_where_in(info, ["part"], [("a",)], ["part"], ["part"])
    with pytest.raises(PermanentError, match="an index source has no rows to page through"):
        source.read_page(info, ["_id"], ["_id"], KeyRange(None, None), None, 10)
    with pytest.raises(PermanentError, match="cannot be rebuilt one by one"):
        make_builder(source, resolve_index_source(source, config(), "w")[0]).by_keys([(pipe,)])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"id": "part"}, r"w\.id: not available when the source is an index"),
        ({"relations": [{"name": "r", "type": "object", "table": "x"}]}, r"w\.relations: not available"),
        ({"build": "database"}, r"w\.build: documents from an index are copied"),
        ({"columns": ["part", "everything"]}, r"w\.columns: no field 'everything' in index 'things'"),
        ({"fields": {"nope": {"analyzer": "standard"}}}, r"w\.fields\.nope: no such field"),
        ({"table": "missing"}, r"w\.table: cannot read index 'missing' from tantivy:///"),
    ],
)
def test_what_a_rebuild_cannot_do_is_a_config_error(
    source: IndexSource, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_index_source(source, config(**settings), "w")


def test_unknown_source_schemes_list_the_index_backends() -> None:
    with pytest.raises(ConfigError, match="or an index to rebuild: tantivy, opensearch"):
        open_source_url("ftp://example.com/x")
