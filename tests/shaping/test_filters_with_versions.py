"""A row filter on an index with a version column (issue 32): ``version: updated_at`` and a
``where:``. Every write of a document carries its row's ``updated_at`` in microseconds; change
capture's positions are another number (here a polled commit counter, ``seq``; elsewhere an
LSN or a binlog offset), far lower. A row that leaves the filter still has its row, so its removal
must carry the row's version too, or the engine refuses it as older than the document it removes
(osmem-server, a TEST DOUBLE of OpenSearch: ``external_gte``), and Tantivy's version ledger drops
it: the document would stay searchable. With ``deletes: soft`` the tombstone is such a write too.

The shop in SQLite, polled by ``seq`` (every table has one; a change sets the next value).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.documents.tombstones import is_tombstone
from sparkindex.targets.registry import open_target
from tests.shaping.test_soft_deletes import checked, polled_shop, reindex, sql, sync

pytestmark = pytest.mark.slow

WHERE = "stock > 100"
CASES = [
    pytest.param("tantivy", "hard", id="tantivy-hard"),
    pytest.param("opensearch", "hard", id="osmem-hard"),
    pytest.param("opensearch", "soft", id="osmem-soft"),
]


def versioned_shop(directory: Path, target: str | None, deletes: str) -> tuple[Pipeline, Path]:
    """The polled shop with ``version: updated_at``, the filter and *deletes*, polled by ``seq``."""
    index = f"    version: updated_at\n    where: {json.dumps(WHERE)}\n    deletes: {deletes}\n"
    _, db = polled_shop(directory, index, target)
    conn = sqlite3.connect(db)
    for table in ("products", "categories", "reviews", "users", "gone"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")
    conn.commit()
    conn.close()
    path = directory / "pipeline.yaml"
    text = path.read_text(encoding="utf-8")
    polled = text.replace("changes: {column: updated_at, tombstones: gone}", "changes: {column: seq, tombstones: gone}")
    assert polled != text
    path.write_text(polled, encoding="utf-8")
    return load_pipeline(path), db


def stored_hashes(pipeline: Pipeline, *ids: str) -> dict[str, list[str]]:
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    try:
        found: dict[str, list[str]] = {}
        for doc_id, doc_hash in target.scan_hashes("products", ids=list(ids)):
            found.setdefault(doc_id, []).append(doc_hash)
        return found
    finally:
        target.close()


def assert_clean(pipeline: Pipeline, tombstones: int) -> None:
    report = checked(pipeline)
    assert (report.missing, report.extra, report.stale, report.duplicates) == (0, 0, 0, 0), report.to_dict()
    assert report.tombstones == tombstones, report.to_dict()


@pytest.mark.parametrize(("engine", "deletes"), CASES)
def test_a_row_leaving_the_filter_is_removed_at_its_rows_version(
    engine: str, deletes: str, tmp_path: Path, spark: Any, request: pytest.FixtureRequest
) -> None:
    target = request.getfixturevalue("osmem_cluster").opensearch_url if engine == "opensearch" else None
    pipeline, db = versioned_shop(tmp_path / "shop", target, deletes)
    conn = sqlite3.connect(db)
    [leaver, comer] = [
        conn.execute(f"SELECT MIN(id) FROM products WHERE {w}").fetchone()[0] for w in (WHERE, f"NOT ({WHERE})")
    ]
    conn.close()
    reindex(pipeline, spark)
    assert sync(pipeline, spark).applied == 0

    # the leaver written once by the sync (Tantivy's ledger then holds its version), then out
    update = "UPDATE products SET {}, updated_at = ?, seq = ? WHERE id = ?"
    sql(db, (update.format("name = 'renamed'"), ("2026-01-02 00:00:00", 1, leaver)))
    assert sync(pipeline, spark).applied == 1
    sql(
        db,
        (update.format("stock = 0"), ("2026-01-03 00:00:00", 2, leaver)),
        (update.format("stock = 500"), ("2026-01-03 00:00:00", 3, comer)),
    )
    summary = sync(pipeline, spark)
    assert (summary.applied, summary.deleted) == (1, 1), summary  # not skipped as older
    held = stored_hashes(pipeline, str(leaver), str(comer))
    if deletes == "soft":
        assert len(held[str(leaver)]) == 1 and is_tombstone(held[str(leaver)][0])
    else:
        assert str(leaver) not in held
    assert len(held[str(comer)]) == 1 and not is_tombstone(held[str(comer)][0])
    assert_clean(pipeline, tombstones=1 if deletes == "soft" else 0)

    # back in: written at its row's version again, which beats the removal's
    sql(db, (update.format("stock = 500"), ("2026-01-04 00:00:00", 4, leaver)))
    assert sync(pipeline, spark).applied == 1
    held = stored_hashes(pipeline, str(leaver))
    assert len(held[str(leaver)]) == 1 and not is_tombstone(held[str(leaver)][0])
    assert_clean(pipeline, tombstones=0)
