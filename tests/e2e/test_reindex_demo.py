"""The demo pipeline end to end on real Spark, SQLite and Tantivy."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.coordination.states import JobStatus
from sparkindex.documents.builder import make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source_url, open_store, open_target
from sparkindex.sources.base import KeyRange
from sparkindex.verify.local import verify_alias
from tests.e2e.shop import execute, make_shop

pytestmark = pytest.mark.slow


def test_demo_reindex_equals_source_and_keeps_previous_version(tmp_path: Path, spark: Any) -> None:
    pipeline = make_shop(tmp_path, products=4000, partition_size=700)
    with open_source_url(pipeline.source_url()) as source, open_target(pipeline) as target:
        first = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert first.status == "COMPLETED"
        assert first.source_rows == first.indexed == 4000
        assert first.index == "products_v1"
        assert target.alias_target("products") == "products_v1"

        # A change, then a second full reindex: a new version behind the alias, the old one kept.
        execute(tmp_path / "shop.db", "UPDATE products SET name = 'renamed lamp' WHERE id = 17")
        second = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert second.status == "COMPLETED"
        assert target.alias_target("products") == "products_v2"
        assert target.list_versions("products") == ["products_v1", "products_v2"]

        # Every source row is in the index with the right content hash.
        plan, _ = resolve_plans(pipeline, source, ["products"])["products"]
        page = make_builder(source, plan).page(KeyRange(None, None), None, 100_000)
        assert page.failures == [] and page.rows == 4000
        expected = {d.id: d.hash for d in page.docs}
        indexed = dict(target.scan_hashes("products"))
        assert indexed == expected
        report = verify_alias(source, target, plan)
        assert (report.missing, report.extra, report.stale, report.checked) == (0, 0, 0, 4000)
        # The old version still has the old content of product 17: it really is the previous build.
        assert dict(target.scan_hashes("products_v1"))["17"] != expected["17"]

        hit = target.search("products", "renamed", limit=3)[0]
        assert hit.id == "17" and hit.source["name"] == "renamed lamp"
        assert isinstance(hit.source["reviews"], list)
        assert hit.source["category"]["id"] is not None

        # A third run prunes: only the last two versions stay.
        ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert target.list_versions("products") == ["products_v2", "products_v3"]

        with open_store(pipeline) as store:
            jobs = store.job_rows.jobs(["products"])
            assert [j.status for j in jobs] == [JobStatus.COMPLETED] * 3
            parts = store.partition_rows.partitions(jobs[0].id)
            assert len(parts) == 6 and all(p.claims == 1 for p in parts)


def test_permanent_rejection_goes_to_dead_letters_exit_1(tmp_path: Path, cli: Path) -> None:
    pipeline = make_shop(tmp_path, products=1500, partition_size=500)
    # SQLite lets a text value into an INTEGER column; the mapping says "long": Tantivy refuses it.
    execute(tmp_path / "shop.db", "UPDATE products SET stock = 'lots' WHERE id = 321")
    run = subprocess.run(
        [str(cli), "reindex", "-c", str(tmp_path / "pipeline.yaml"), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1, run.stderr
    summary = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert summary["status"] == "COMPLETED_WITH_ERRORS"
    assert (summary["failed"], summary["indexed"], summary["source_rows"]) == (1, 1499, 1500)

    dlq = subprocess.run(
        [str(cli), "dlq", "list", "-c", str(tmp_path / "pipeline.yaml"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    letters = orjson.loads(dlq.stdout.strip().splitlines()[-1])["dead_letters"]
    assert [(d["doc_id"], d["alias"]) for d in letters] == [("321", "products")]
    assert "stock" in letters[0]["error_message"] and letters[0]["attempts"] == 1
    assert letters[0]["job_id"] == summary["job_id"]

    # The alias moved anyway: the job was not blocked by one bad document.
    with open_target(pipeline) as target:
        assert target.alias_target("products") == summary["index"]
    verify = subprocess.run(
        [str(cli), "verify", "-c", str(tmp_path / "pipeline.yaml"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 1  # drift: the dead-lettered document is missing
    assert orjson.loads(verify.stdout.strip().splitlines()[-1])["missing"] == 1
