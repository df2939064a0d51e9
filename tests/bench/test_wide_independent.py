"""The independent baseline (bench/independent.py) indexes what the pipeline indexes.

Why: the benchmark judges the pipeline's builder and Tantivy conversion against a loop that shares
none of their code. That ratio means something only if both sides index the same thing: the same
schema, the same stored source (same keys, nesting, date and float spellings, NULLs) and the same
Tantivy fields. Built on a tiny SQLite wide database through the pipeline's own DocumentBuilder
and ``to_tantivy_json``, without Spark. The last test shows the comparison is sharp enough to
catch a date written differently, an integral float written as an integer, or a NULL dropped.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from bench.independent import WideDb, encode, pages, schema_mismatch
from bench.wide import generate_wide_sqlite, write_wide_pipeline

from sparkindex.config import load_pipeline
from sparkindex.documents import DocumentBuilder, infer_mapping, resolve_index
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json

ROOTS = 60
PAGE = 7  # several keyset pages, the last one short


@dataclass(frozen=True)
class Indexed:
    id: str
    source: bytes
    body: dict[str, Any]  # the Tantivy JSON, parsed


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wide")
    generate_wide_sqlite(work / "wide.db", ROOTS)
    return write_wide_pipeline(work)


def pipeline_docs(pipeline: Path) -> list[Indexed]:
    config = load_pipeline(pipeline)
    source = open_source_url(config.source_url())
    plan = resolve_index(source, config.indexes[0], "indexes[0]")
    _, sp = build_schema(infer_mapping(plan, "indexes[0]"))
    builder = DocumentBuilder(source, plan)
    out: list[Indexed] = []
    after = None
    while True:
        page = builder.page(KeyRange(None, None), after, PAGE)
        assert not page.failures
        out += [Indexed(d.id, d.source, orjson.loads(to_tantivy_json(d.bulk_item(), sp))) for d in page.docs]
        if page.rows < PAGE:
            return out
        after = page.last_key


def independent_docs(pipeline: Path) -> list[Indexed]:
    db = WideDb(f"sqlite:///{pipeline.parent / 'wide.db'}")
    try:
        return [Indexed(i, s, orjson.loads(b)) for docs in pages(db, PAGE) for i, s, b in map(encode, docs)]
    finally:
        db.close()


def canonical(source: bytes) -> bytes:
    """Key order aside, the JSON as written: 10.0 and 10 differ, '2023-05-17' and a datetime too."""
    return orjson.dumps(orjson.loads(source), option=orjson.OPT_SORT_KEYS)


def normalised(body: dict[str, Any]) -> dict[str, Any]:
    """A Tantivy body with what Tantivy reads alike made alike: the root date as an instant
    (``Z`` and ``+00:00`` are one), ``_source`` decoded and canonical, and ``[]`` (no value,
    how the pipeline overrides a null) as a missing field."""
    out = {k: v for k, v in body.items() if v != []}
    out["placed_at"] = dt.datetime.fromisoformat(out["placed_at"])
    out["_source"] = canonical(base64.b64decode(out["_source"]))
    return out


def differences(ours: list[Indexed], theirs: list[Indexed]) -> list[str]:
    if [d.id for d in ours] != [d.id for d in theirs]:
        return [f"ids differ: {[d.id for d in ours][:10]} against {[d.id for d in theirs][:10]}"]
    out = []
    for mine, pipe in zip(ours, theirs, strict=True):
        if canonical(mine.source) != canonical(pipe.source):
            out.append(f"{mine.id}: source {mine.source[:400]!r} against {pipe.source[:400]!r}")
        elif normalised(mine.body) != normalised(pipe.body):
            a, b = normalised(mine.body), normalised(pipe.body)
            keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            out.append(f"{mine.id}: Tantivy fields {keys} differ: {[(a.get(k), b.get(k)) for k in keys]}")
    return out


def test_the_schemas_are_equal(wide: Path) -> None:
    assert schema_mismatch(wide) == []


def test_the_sample_has_nulls_at_every_level(wide: Path) -> None:
    """Otherwise the equality below would say nothing about how NULLs are written."""
    docs = [orjson.loads(d.source) for d in independent_docs(wide)]
    assert len(docs) == ROOTS
    assert any(d["customer"] is None for d in docs)
    assert any(d["customer"] and d["customer"]["company"] is None for d in docs)
    companies = [d["customer"]["company"] for d in docs if d["customer"] and d["customer"]["company"]]
    assert any(c["country"] is None for c in companies) and any(c["country"] for c in companies)
    assert any(d["note"] is None for d in docs) and any(d["total"] is None for d in docs)
    lines = [line for d in docs for line in d["lines"]]
    assert 3.5 * ROOTS <= len(lines) <= 4.5 * ROOTS and all(len(line) == 16 for line in lines)
    for column in ("discount", "weight_kg", "delivery_date", "comment"):
        assert any(line[column] is None for line in lines), column
    assert any(isinstance(line["discount"], float) and line["discount"].is_integer() for line in lines)


def test_the_documents_equal_the_pipelines(wide: Path) -> None:
    ours, theirs = independent_docs(wide), pipeline_docs(wide)
    assert len(theirs) == ROOTS
    assert differences(ours, theirs) == []
    # the stored bytes are the same too, so the content hashes are
    assert [d.body["_hash"] for d in ours] == [d.body["_hash"] for d in theirs]


def _date_as_datetime(line: dict[str, Any]) -> bool:
    line["ship_date"] += "T00:00:00"
    return True


def _integral_float_as_integer(line: dict[str, Any]) -> bool:
    value = line["discount"]
    if not (isinstance(value, float) and value.is_integer()):
        return False
    line["discount"] = int(value)  # equal in Python (5 == 5.0), not in JSON
    return True


def _null_dropped(line: dict[str, Any]) -> bool:
    if line["delivery_date"] is not None:
        return False
    del line["delivery_date"]
    return True


@pytest.mark.parametrize("change", [_date_as_datetime, _integral_float_as_integer, _null_dropped])
def test_the_comparison_catches_a_value_written_differently(
    wide: Path, change: Callable[[dict[str, Any]], bool]
) -> None:
    db = WideDb(f"sqlite:///{wide.parent / 'wide.db'}")
    try:
        docs = [doc for page in pages(db, PAGE) for doc in page]
    finally:
        db.close()
    victim = next(d for d in docs if any(change(line) for line in d["lines"]))  # changes one line
    ours = [Indexed(i, s, orjson.loads(b)) for i, s, b in map(encode, docs)]
    found = differences(ours, pipeline_docs(wide))
    assert len(found) == 1 and found[0].startswith(f"{victim['id']}: source"), found
