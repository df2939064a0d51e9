"""Helpers for end-to-end tests on the sample shop."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop


def make_shop(
    directory: Path,
    products: int,
    partition_size: int,
    extra_yaml: str = "",
    page_size: int | None = None,
    batch_size: int | None = None,
) -> Pipeline:
    directory.mkdir(parents=True, exist_ok=True)
    generate_shop(directory / "shop.db", products)
    text = PIPELINE_YAML.format(partition_size=partition_size).replace("master: local[*,4]", "master: local[2,4]")
    if page_size is not None:
        text = text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n    page_size: {page_size}\n")
    if batch_size is not None:
        text = text.replace("  batch_size: 25000\n", f"  batch_size: {batch_size}\n")
    (directory / "pipeline.yaml").write_text(text + extra_yaml, encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml")


def execute(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(db)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> None:
    """Poll *predicate* until it holds; the condition is the synchronisation, not the clock."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def store_of(pipeline: Pipeline) -> CoordinationStore:
    return CoordinationStore(pipeline.coordination_url())
