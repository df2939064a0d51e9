"""The shaped benchmark's pipeline (bench/shaped.py) is the wide pipeline plus its shape, nothing else.

Why: the line's ratio compares a shaped run against the unshaped one on the same data; it means
something only if the shaped pipeline differs by the filter and the two computed fields alone, and
if they do what the line says (half the roots kept, the fields present). Built on a tiny SQLite
wide database through the pipeline's own plan and builder, without Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from bench.shaped import COMPUTED, FILTER, write_shaped_pipeline
from bench.wide import generate_wide_sqlite, write_wide_pipeline

from sparkindex.config import load_pipeline
from sparkindex.documents import DocumentBuilder, resolve_index
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange

ROOTS = 41


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("shaped")
    generate_wide_sqlite(work / "wide.db", ROOTS)
    wide = write_wide_pipeline(work)
    return wide, write_shaped_pipeline(wide, f"sqlite:///{work / 'wide.db'}", work / "shaped")


def test_only_the_shape_differs(pipelines: tuple[Path, Path]) -> None:
    wide, shaped = (yaml.safe_load(p.read_text()) for p in pipelines)
    index = shaped["indexes"][0]
    assert index.pop("where") == FILTER and index.pop("computed") == COMPUTED
    assert shaped["source"]["url"].endswith("/wide.db") and shaped["source"]["url"] != wide["source"]["url"]
    shaped["source"] = wide["source"]
    assert shaped == wide


def test_half_the_roots_with_the_computed_fields(pipelines: tuple[Path, Path]) -> None:
    config = load_pipeline(pipelines[1])
    source = open_source_url(config.source_url())
    try:
        plan = resolve_index(source, config.indexes[0], "indexes[0]")
        page = DocumentBuilder(source, plan).page(KeyRange(None, None), None, ROOTS)
    finally:
        source.close()
    assert not page.failures
    docs = [d.fields for d in page.docs]
    assert [d["id"] for d in docs] == list(range(2, ROOTS + 1, 2))
    for doc in docs:
        assert doc["reference"] == f"{doc['number']}/{doc['status']}"
        assert doc["total_cents"] == (None if doc["total"] is None else round(doc["total"] * 100))
