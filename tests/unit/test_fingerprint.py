"""A job's fingerprint changes with everything that decides its documents, and only with that."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.shop import make_shop

from sparkindex.config import load_pipeline
from sparkindex.documents.fingerprint import plan_fingerprint
from sparkindex.documents.planning import resolve_plans
from sparkindex.resources import open_source_url


def fingerprint_of(directory: Path, name: str, old: str = "", new: str = "") -> str:
    """The fingerprint of the shop's pipeline with *old* replaced by *new* (same source)."""
    text = (directory / "pipeline.yaml").read_text(encoding="utf-8")
    assert old in text
    (directory / name).write_text(text.replace(old, new, 1) if old else text)
    pipeline = load_pipeline(directory / name)
    plans = resolve_plans(pipeline, open_source_url(pipeline.source_url()), ["products"])
    return plan_fingerprint(plans, pipeline)


TABLE = "    table: products\n"


@pytest.mark.parametrize(
    ("old", "new", "changes"),
    [
        ("", "", False),
        (TABLE, TABLE + "    version: id\n", True),
        (TABLE, TABLE + "    settings: {number_of_shards: 2}\n", True),
        ("description: {analyzer: english", "description: {analyzer: standard", True),
        (TABLE, TABLE + "    page_size: 17\n", False),
        ("partition_size: 10", "partition_size: 5", False),
        ("batch_size: 25000", "batch_size: 70", False),
    ],
)
def test_fingerprint_covers_what_decides_the_documents(tmp_path: Path, old: str, new: str, changes: bool) -> None:
    make_shop(tmp_path, products=20, partition_size=10)
    base = fingerprint_of(tmp_path, "base.yaml")
    other = fingerprint_of(tmp_path, "other.yaml", old, new)
    assert (base != other) is changes
