"""``dlq redrive``: dead letters rebuilt from the source by key and retried.

A document fixed in the source is indexed and its letter leaves the table (kept as resolved);
one still broken keeps its letter with one more attempt per re-drive; a row deleted since is
deleted from the index and resolved as gone; ``--error-class`` touches only its class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.coordination.store import CoordinationStore
from sparkindex.jobs.redrive import redrive
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_store
from sparkindex.targets.base import BulkItem
from tests.e2e.guarantee_helpers import run_cli
from tests.e2e.shop import execute, make_shop
from tests.jobs.planting import built_documents, index_without_spark, tantivy, write


def letters(store: CoordinationStore) -> dict[str, tuple[str, int]]:
    return {d.doc_id: (d.error_class, d.attempts) for d in store.dead_letters.list(alias="products")}


@pytest.mark.slow
def test_a_fixed_document_is_indexed_and_a_broken_one_keeps_its_attempts(tmp_path: Path, spark: Any) -> None:
    pipeline = make_shop(tmp_path, products=300, partition_size=100)
    db = tmp_path / "shop.db"
    execute(db, "UPDATE products SET price = 9e999 WHERE id IN (42, 43)")  # +inf: JSON cannot carry it
    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert (summary.status, summary.failed, summary.indexed) == ("COMPLETED_WITH_ERRORS", 2, 298)
    with open_store(pipeline) as store:
        assert letters(store) == {"42": ("NonFinite", 1), "43": ("NonFinite", 1)}

        execute(db, "UPDATE products SET price = 9.99 WHERE id = 42")  # the user fixes one row
        report = redrive(pipeline)
        assert (report.attempted, report.succeeded, report.gone, report.failed) == (2, 1, 0, 1)
        assert [(f["doc_id"], f["error_class"], f["attempts"]) for f in report.still_failing] == [
            ("43", "NonFinite", 2)
        ]
        assert report.exit_code == 1
        assert letters(store) == {"43": ("NonFinite", 2)}, "the fixed one left; the broken one counted an attempt"
        [resolved] = store.dead_letters.resolved(alias="products")
        assert (resolved.letter.doc_id, resolved.resolution, resolved.letter.attempts) == ("42", "redriven", 1)
        doc = built_documents(pipeline, "products")["42"]
        with tantivy(pipeline) as target:
            assert dict(target.scan_hashes("products", ids=["42", "43"])) == {"42": doc.hash}

        again = redrive(pipeline)
        assert (again.attempted, again.failed) == (1, 1)
        assert letters(store) == {"43": ("NonFinite", 3)}, "every re-drive is an attempt of its own"


def cli_json(cli: Path, *args: str) -> tuple[int, dict[str, Any]]:
    run = run_cli(cli, *args, "--json")
    lines = run.stdout.strip().splitlines()
    assert lines, run.stderr
    return run.returncode, orjson.loads(lines[-1])


def test_error_class_filter_and_rows_gone_from_the_source(tmp_path: Path, cli: Path) -> None:
    pipeline = make_shop(tmp_path, products=120, partition_size=100)
    index = index_without_spark(pipeline, "products")
    config = str(tmp_path / "pipeline.yaml")
    db = tmp_path / "shop.db"
    with open_store(pipeline) as store:
        # as the reindex leaves them: 7 rejected by the target (so absent from the index), 8 a row that
        # cannot be built, 9 rejected once and its row deleted since (an old copy still indexed)
        with tantivy(pipeline) as target:
            write(target, index, [BulkItem("7", op="delete"), BulkItem("8", op="delete")])
        store.dead_letters.add(
            "job-1", "products", "part-1", [("7", "MapperParsingException", "failed to parse [price]")]
        )
        store.dead_letters.add(
            "job-1", "products", "part-1", [("9", "MapperParsingException", "failed to parse [name]")]
        )
        store.dead_letters.add("job-1", "products", "part-2", [("8", "NonFinite", "field 'price' is NaN or infinite")])
        execute(db, "UPDATE products SET price = 9e999 WHERE id = 8")
        execute(db, "DELETE FROM reviews WHERE product_id = 9")
        execute(db, "DELETE FROM products WHERE id = 9")

        code, body = cli_json(cli, "dlq", "redrive", "-c", config, "--error-class", "NonFinite")
        assert code == 1
        assert (body["attempted"], body["succeeded"], body["failed"], body["error_class"]) == (1, 0, 1, "NonFinite")
        assert letters(store) == {
            "7": ("MapperParsingException", 1),
            "8": ("NonFinite", 2),
            "9": ("MapperParsingException", 1),
        }, "other classes untouched"

        code, body = cli_json(
            cli, "dlq", "redrive", "-c", config, "--alias", "products", "--error-class", "MapperParsingException"
        )
        assert code == 0
        assert (body["attempted"], body["succeeded"], body["gone"], body["failed"]) == (2, 1, 1, 0)
        assert letters(store) == {"8": ("NonFinite", 2)}
        assert {r.letter.doc_id: r.resolution for r in store.dead_letters.resolved()} == {"7": "redriven", "9": "gone"}
        with tantivy(pipeline) as target:
            hashes = dict(target.scan_hashes(index, ids=["7", "8", "9"]))
        assert hashes == {"7": built_documents(pipeline, "products")["7"].hash}, "7 indexed; 9 deleted with its row"

        code, body = cli_json(cli, "dlq", "list", "-c", config, "--error-class", "NonFinite")
        assert code == 0 and [d["doc_id"] for d in body["dead_letters"]] == ["8"] and body["count"] == 1
        code, body = cli_json(cli, "dlq", "redrive", "-c", config, "--error-class", "NoSuchClass")
        assert (code, body["attempted"]) == (0, 0)


def test_letters_of_an_alias_without_an_index_are_left_alone(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=10, partition_size=10)
    with open_store(pipeline) as store:
        store.dead_letters.add("job-1", "products", None, [("3", "MapperParsingException", "rejected")])
        report = redrive(pipeline)
        assert (report.attempted, report.skipped, report.exit_code) == (0, 1, 1)
        assert "points at no index" in report.notes[0]
        assert letters(store) == {"3": ("MapperParsingException", 1)}
