"""What a reindex guarantees, end to end on real Spark, SQLite/PostgreSQL and Tantivy.

* no duplicates when the key sorts under an ICU collation;
* verify sees every kind of drift it reports (missing, extra, stale, duplicates);
* finalize refuses to swap the alias when the index's count disagrees with the acknowledged one;
* rows that cannot be built are dead-lettered and verify counts them;
* a changed config refuses to resume an unfinished job (``--new`` starts afresh).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.records import EntityStats
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.documents.builder import BuiltDocument, make_builder
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import ConfigError
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source_url, open_store, open_target
from sparkindex.retry import Backoff
from sparkindex.sources.base import KeyRange
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget
from sparkindex.verify.local import verify_alias
from sparkindex.verify.verifier import VerifyReport
from sparkindex.worker.bulk import bulk_with_retries
from tests.e2e.guarantee_helpers import finish_and_wait, pg_table, plant_raw, run_cli, tantivy_body, write_pipeline
from tests.e2e.shop import execute, make_shop

pytestmark = pytest.mark.slow
P = PartitionStatus


def tantivy(pipeline: Pipeline) -> TantivyTarget:
    """The pipeline's target, which these tests need to be Tantivy's; the caller closes it."""
    target = open_target(pipeline)
    assert isinstance(target, TantivyTarget)
    return target


def verify(pipeline: Pipeline, alias: str) -> VerifyReport:
    with open_source_url(pipeline.source_url()) as source, tantivy(pipeline) as target:
        plan, _ = resolve_plans(pipeline, source, [alias])[alias]
        return verify_alias(source, target, plan)


def built_documents(pipeline: Pipeline, alias: str) -> dict[str, BuiltDocument]:
    """Every document the source builds for *alias*, by id, as the job builds them."""
    with open_source_url(pipeline.source_url()) as source:
        plan, _ = resolve_plans(pipeline, source, [alias])[alias]
        return {d.id: d for d in make_builder(source, plan).page(KeyRange(None, None), None, 100_000).docs}


DRIFT = ("missing", "extra", "stale", "duplicates", "unbuildable")


def counts(report: VerifyReport) -> dict[str, int]:
    return {k: getattr(report, k) for k in ("checked", "index_docs", *DRIFT)}


def expected(checked: int, index_docs: int, **drift: int) -> dict[str, int]:
    """A verify report's counts: every kind of drift 0 unless given."""
    return {"checked": checked, "index_docs": index_docs, **dict.fromkeys(DRIFT, 0), **drift}


# -- 1. no duplicates under an ICU collation --------------------------------------------------------
def icu_keys(n: int) -> list[str]:
    """Keys that sort differently under ICU than in Python: case, accents, punctuation, blanks."""
    keys = dict.fromkeys(["a-b", "A_b", "a b", "Ab", "ab.", "ab", "AB", "é", "E", "e", "É", "a|b", "a\\b", "-", "_"])
    rng = random.Random(20240917)
    alphabet = "aAbBeEéÉ-_. ,'!|\\"
    while len(keys) < n:
        keys[rng.choice("aAbBeEéÉ") + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))] = None
    return list(keys)


@pytest.mark.postgres
def test_no_duplicates_under_an_icu_collation(tmp_path: Path, spark: Any, services: dict[str, str]) -> None:
    keys = icu_keys(5000)
    rows = [(k, i, f"label {k!r}") for i, k in enumerate(keys)]
    ddl = 'id text COLLATE "en-US-x-icu" PRIMARY KEY, n integer NOT NULL, label text'
    with pg_table(services["postgres"], ddl, rows, "icu") as table:
        pipeline = write_pipeline(tmp_path, services["postgres"], "labels", table, "    partition_size: 200\n")
        summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        with open_store(pipeline) as store:
            assert summary.status == "COMPLETED", store.job_rows.job(summary.job_id).error_message
            parts = store.partition_rows.partitions(summary.job_id)
        assert summary.indexed == summary.source_rows == 5000
        assert len(parts) >= 10, "the key space must really be split"
        assert sum(p.success_count for p in parts) == 5000, "partitions overlap or leave gaps"
        report = verify(pipeline, "labels")
    assert counts(report) == expected(5000, 5000), report.samples


# -- 2. verify sees every kind of drift --------------------------------------------------------------
def test_verify_reports_each_kind_of_drift(tmp_path: Path, spark: Any, cli: Path) -> None:
    pipeline = make_shop(tmp_path, products=300, partition_size=100)
    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert summary.status == "COMPLETED" and summary.indexed == 300
    with tantivy(pipeline) as target:
        index = summary.index
        docs = built_documents(pipeline, "products")

        def variant(doc_id: str, new_id: str, name: str) -> BulkItem:
            fields = {**(docs[doc_id].fields or {}), "id": docs[doc_id].fields["id"], "name": name}  # type: ignore[index]
            body = dumps_document(fields)
            return BulkItem(new_id, body, content_hash(body), fields=fields)

        extra_id = 'no-such-row|"é'
        # Through the target's bulk path, as the job writes (a connection that races the service's
        # exit after finalize is a transient failure, retried).
        outcome = bulk_with_retries(
            target,
            index,
            [
                BulkItem("5", op="delete"),  # missing
                variant("8", extra_id, "a product nobody sells"),  # extra
                variant("7", "7", "renamed behind the job's back"),  # stale
            ],
            retries=5,
            backoff=Backoff(0.05, 0.5),
        )
        assert (outcome.success, outcome.failures) == (3, [])
        finish_and_wait(target, index)  # no writer service any more: a raw writer may open the directory
        plant_raw(target.root, index, [tantivy_body(target.root, index, docs["9"])])  # a second copy of "9"

        report = verify(pipeline, "products")
        # the index holds 300 - 1 deleted + 1 extra + 1 duplicate
        assert counts(report) == expected(300, 301, missing=1, extra=1, stale=1, duplicates=1)
        # the extra document has no sort key (written without one): the whole index is scanned
        # for it, and nothing is counted twice or blamed on motion
        assert not [n for n in report.notes if "changed while verify ran" in n], report.notes
        assert {k: v for k, v in report.samples.items() if v} == {
            "missing": ["5"],
            "extra": [extra_id],
            "stale": ["7"],
            "duplicates": ["9"],
        }

        run = run_cli(cli, "verify", "-c", str(tmp_path / "pipeline.yaml"), "--json")
        assert run.returncode == 1, run.stderr
        body = orjson.loads(run.stdout.strip().splitlines()[-1])
        wanted = {"missing": 1, "extra": 1, "stale": 1, "duplicates": 1, "index_docs": 301, "checked": 300}
        assert {k: body[k] for k in wanted} == wanted


# -- 3. finalize refuses to swap on a count mismatch ---------------------------------------------------
class PlantBeforeFinalize:
    """A progress listener that, when the driver announces finalizing, adds a second copy of one
    document to the version being built (as an overlapping partition would)."""

    def __init__(self, pipeline: Pipeline, doc: BuiltDocument) -> None:
        self.pipeline = pipeline
        self.doc = doc
        self.planted_in: str | None = None
        self.phases: list[str] = []

    def phase(self, text: str) -> None:
        self.phases.append(text)
        if text.startswith("finalizing"):
            with open_store(self.pipeline) as store:
                job = store.job_rows.jobs(["products"])[0]
            index = job.targets["products"]
            with tantivy(self.pipeline) as target:
                finish_and_wait(target, index)
                plant_raw(target.root, index, [tantivy_body(target.root, index, self.doc)])
            self.planted_in = index

    def stats(self, stats: dict[str, EntityStats]) -> None:
        return None


def test_finalize_refuses_to_swap_on_a_count_mismatch(tmp_path: Path, spark: Any) -> None:
    pipeline = make_shop(tmp_path, products=1200, partition_size=400)
    first = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert first.status == "COMPLETED" and first.index == "products_v1"

    planter = PlantBeforeFinalize(pipeline, built_documents(pipeline, "products")["11"])
    second = ReindexJob(pipeline, progress=planter, spark_factory=lambda: spark).run()
    assert planter.planted_in == second.index == "products_v2"
    assert second.status == "FAILED" and second.exit_code == 3
    assert second.indexed == 1201
    with open_store(pipeline) as store:
        error = store.job_rows.job(second.job_id).error_message or ""
    assert "products_v2 holds 1,201 documents but its partitions acknowledged 1,200" in error, error
    with tantivy(pipeline) as target:
        assert target.alias_target("products") == "products_v1", "the alias must stay on the previous version"
        assert target.count("products") == 1200


# -- 4. unbuildable rows ------------------------------------------------------------------------------
def test_unbuildable_rows_are_dead_lettered_and_verify_counts_them(tmp_path: Path, spark: Any) -> None:
    pipeline = make_shop(tmp_path, products=500, partition_size=200)
    db = tmp_path / "shop.db"
    execute(db, "UPDATE products SET price = 9e999 WHERE id = 42")  # SQLite turns NaN into NULL; +inf it keeps
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT price FROM products WHERE id = 42").fetchone() == (float("inf"),)

    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert summary.status == "COMPLETED_WITH_ERRORS" and summary.exit_code == 1
    assert (summary.failed, summary.indexed, summary.source_rows) == (1, 499, 500)
    with open_store(pipeline) as store:
        [letter] = store.dead_letters.list(alias="products")
    assert (letter.doc_id, letter.error_class, letter.job_id) == ("42", "NonFinite", summary.job_id)
    assert "price" in letter.error_message

    report = verify(pipeline, "products")
    assert counts(report) == expected(500, 499, missing=1, unbuildable=1)
    assert report.samples["missing"] == report.samples["unbuildable"] == ["42"]


# -- 5. a changed config refuses to resume --------------------------------------------------------------
class InterruptAtFirstPass:
    def phase(self, text: str) -> None:
        if text.startswith("pass 1"):
            raise KeyboardInterrupt  # Ctrl-C just as the first pass starts

    def stats(self, stats: dict[str, EntityStats]) -> None:
        return None


def test_a_changed_config_refuses_to_resume(tmp_path: Path, spark: Any, cli: Path) -> None:
    pipeline = make_shop(tmp_path, products=400, partition_size=100)
    with open_store(pipeline) as store:
        with pytest.raises(KeyboardInterrupt):
            ReindexJob(pipeline, progress=InterruptAtFirstPass(), spark_factory=lambda: spark).run()
        [interrupted] = store.job_rows.jobs(["products"])
        assert (interrupted.status, interrupted.error_message) == (JobStatus.FAILED, "interrupted")
        assert {p.status for p in store.partition_rows.partitions(interrupted.id)} == {P.PENDING}

        path = tmp_path / "pipeline.yaml"
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        relations = raw["indexes"][0]["relations"]
        raw["indexes"][0]["relations"] = [r for r in relations if r["name"] != "reviews"]  # documents without reviews
        assert len(raw["indexes"][0]["relations"]) == len(relations) - 1
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        changed = load_pipeline(path)

        with pytest.raises(ConfigError, match="--new"):
            ReindexJob(changed, spark_factory=lambda: spark).run()
        run = run_cli(cli, "reindex", "-c", str(path), "--json")
        assert run.returncode == 2, run.stderr
        assert "--new" in run.stderr and interrupted.id in run.stderr
        assert [j.id for j in store.job_rows.jobs(["products"])] == [interrupted.id], (
            "nothing may be planned or resumed"
        )
        assert store.job_rows.job(interrupted.id).status == JobStatus.FAILED

        fresh = ReindexJob(changed, new=True, spark_factory=lambda: spark).run()
        assert fresh.status == "COMPLETED" and fresh.job_id != interrupted.id
        assert fresh.indexed == fresh.source_rows == 400
        assert store.job_rows.job(interrupted.id).status == JobStatus.FAILED
        report = verify(changed, "products")
        assert report.clean and report.index_docs == 400
        with tantivy(changed) as target:
            hit = target.search("products", "", limit=1)[0]
        assert "reviews" not in hit.source, "the new job built documents from the new config"
