"""Per-document transforms (``indexes[].transform``) on a real SQLite shop, built by Spark workers.

The toy embedding (``tests.support.toy_embedding``) logs one line per call to a file: the Spark
workers are separate processes, so the file is the honest counter. The variable naming it is set
when this module is collected, before the session's Spark workers start (they inherit it).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sparkindex import api
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from tests.support.polled_shop import polled_shop_db
from tests.support.toy_embedding import LOG_ENV, logged_calls, vector

pytestmark = pytest.mark.slow

os.environ.setdefault(LOG_ENV, str(Path(tempfile.gettempdir()) / f"sparkindex-toy-embed-{os.getpid()}.log"))
CALLS = Path(os.environ[LOG_ENV])
PRODUCTS = 120


def _shop(directory: Path, transform: str, polling: bool = False) -> tuple[Path, Path]:
    """The shop (SQLite, Tantivy) with *transform* as the index's ``transform:`` YAML value."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    if polling:
        polled_shop_db(db, PRODUCTS, reviews_per_product=1)
    else:
        generate_shop(db, PRODUCTS, reviews_per_product=1)
    text = PIPELINE_YAML.format(partition_size=40).replace("master: local[*,4]", "master: local[2,4]")
    shape = f"    complexity: 3.0\n    transform: {transform}\n"
    if polling:
        shape += "    changes: {column: updated_at}\n"
    text = text.replace("    complexity: 3.0\n", shape)
    path = directory / "pipeline.yaml"
    path.write_text(text + ("sync:\n  trigger_s: 0.2\n" if polling else ""), encoding="utf-8")
    return path, db


def _clean(pipeline: Path, spark: Any) -> api.VerifyResult:
    result = api.verify(pipeline, spark=spark)
    assert (result.missing, result.extra, result.stale, result.duplicates) == (0, 0, 0, 0), result.report
    return result


def _calls(since: int) -> list[str]:
    return logged_calls(CALLS)[since:]


def _document(pipeline: Path, doc_id: str) -> dict[str, Any]:
    hits = [h for h in api.search(pipeline, "products", f'_id:"{doc_id}"', limit=3).hits if h.id == doc_id]
    assert hits, f"document {doc_id} is not in the index"
    return hits[0].source


def test_an_embedding_runs_again_only_for_documents_whose_inputs_changed(tmp_path: Path, spark: Any) -> None:
    transform = (
        "{function: 'tests.support.toy_embedding:embed', version: '1', on_change: [name, description],"
        " adds: [embedding]}\n"
        "    mapping: {properties: {embedding: {type: knn_vector, dimension: 8}}}"
    )
    pipeline, db = _shop(tmp_path, transform, polling=True)

    start = len(logged_calls(CALLS))
    first = api.reindex(pipeline, spark=spark)
    assert first.indexed == PRODUCTS
    assert sorted(map(int, _calls(start))) == list(range(1, PRODUCTS + 1))  # once per document
    _clean(pipeline, spark)

    # 1% of the products' inputs change (and others change only what the embedding ignores)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE products SET description = 'a brand new lamp' WHERE id = 17")
    conn.execute("UPDATE products SET price = price + 1, stock = 3 WHERE id IN (5, 6, 7)")
    conn.commit()
    conn.close()
    start = len(logged_calls(CALLS))
    second = api.reindex(pipeline, spark=spark)
    assert second.indexed == PRODUCTS and second.index != first.index
    assert _calls(start) == ["17"]
    _clean(pipeline, spark)
    assert _document(pipeline, "17")["embedding"] == vector(f"{_name(db, 17)} a brand new lamp")
    assert _document(pipeline, "6")["embedding"] == vector(f"{_name(db, 6)} {_description(db, 6)}")

    # the sync: two names change, one price; only the two are embedded again
    conn = sqlite3.connect(db)
    later = "updated_at = '2026-01-02 00:00:00'"
    conn.execute(f"UPDATE products SET name = 'Renamed ''Lamp''', {later} WHERE id IN (3, 90)")
    conn.execute(f"UPDATE products SET price = 1.5, {later} WHERE id = 4")
    conn.commit()
    conn.close()
    start = len(logged_calls(CALLS))
    synced = api.sync(pipeline, spark=spark)
    assert synced.outcome == api.Outcome.DONE
    assert sorted(_calls(start)) == ["3", "90"]
    _clean(pipeline, spark)
    assert _document(pipeline, "90")["embedding"] == vector(f"Renamed 'Lamp' {_description(db, 90)}")
    assert _document(pipeline, "4")["price"] == 1.5


def _name(db: Path, pid: int) -> str:
    return str(sqlite3.connect(db).execute("SELECT name FROM products WHERE id = ?", (pid,)).fetchone()[0])


def _description(db: Path, pid: int) -> str:
    return str(sqlite3.connect(db).execute("SELECT description FROM products WHERE id = ?", (pid,)).fetchone()[0])


def test_a_new_transform_version_makes_every_document_stale_and_repair_rebuilds_them(
    tmp_path: Path, spark: Any
) -> None:
    pipeline, _ = _shop(tmp_path, "{function: 'tests.support.toy_embedding:versioned', version: '1'}")
    assert api.reindex(pipeline, spark=spark).indexed == PRODUCTS
    _clean(pipeline, spark)
    assert _document(pipeline, "1")["toy_version"] == 1

    pipeline.write_text(pipeline.read_text().replace("version: '1'", "version: '2'"), encoding="utf-8")
    drift = api.verify(pipeline, spark=spark)
    assert (drift.stale, drift.missing, drift.extra) == (PRODUCTS, 0, 0)
    repaired = api.repair(pipeline, spark=spark)
    assert repaired.report["repair"]["indexed"] == PRODUCTS
    _clean(pipeline, spark)


def test_a_raising_transform_dead_letters_those_documents_and_loses_nothing_else(tmp_path: Path, spark: Any) -> None:
    pipeline, _ = _shop(tmp_path, "tests.support.toy_embedding:raising")
    failing = {str(i) for i in range(7, PRODUCTS + 1, 7)}
    result = api.reindex(pipeline, spark=spark)
    assert result.outcome == api.Outcome.DONE_WITH_ERRORS
    assert (result.indexed, result.failed) == (PRODUCTS - len(failing), len(failing))
    letters = api.dead_letters(pipeline, limit=1000).letters
    assert {d.doc_id for d in letters} == failing
    assert {d.error_class for d in letters} == {"TransformError"}
    assert all(d.error_message.startswith("ValueError: bad row ") for d in letters), letters[0]
    # verify counts a row that cannot be built as missing and as unbuildable, and nothing else
    report = api.verify(pipeline, spark=spark)
    assert (report.extra, report.stale, report.duplicates) == (0, 0, 0), report.report
    assert report.missing == report.report["unbuildable"] == len(failing)


def test_a_transform_that_cannot_be_imported_is_refused_before_any_work(tmp_path: Path, spark: Any) -> None:
    pipeline, _ = _shop(tmp_path, "tests.support.toy_embedding:no_such_function")
    with pytest.raises(api.ConfigError, match=r"indexes\[0\]\.transform\.function: cannot import"):
        api.reindex(pipeline, spark=spark)
