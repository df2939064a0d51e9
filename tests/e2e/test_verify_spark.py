"""Verify and repair on Spark: planted drift of every kind, on SQLite and PostgreSQL sources,
into Tantivy and OpenSearch.

OpenSearch here is osmem-server, an in-memory OpenSearch-compatible TEST DOUBLE: results on it are
sparkindex's side of the exchange (the lookups, scans and writes it sends), not OpenSearch's.
It keeps one document per id whatever the routing, so no duplicate can be planted there (a real
cluster holds two when one id was written under two routings): the duplicate is planted on
Tantivy only.

The PostgreSQL table is hostile: a composite key whose text part holds ``|`` and ``\\`` and sorts
under an ICU collation (mixed case, accents, punctuation), NULLs beside it, and the extra
document's key differs from real ones only in its second part.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_store
from sparkindex.verify.range_checksums import CHECKSUMS, DOCUMENTS
from sparkindex.verify.run import run_verify
from sparkindex.verify.verifier import VerifyReport
from tests.e2e.guarantee_helpers import pg_table, run_cli, write_pipeline
from tests.e2e.shop import make_shop
from tests.e2e.test_guarantees import icu_keys
from tests.jobs.planting import built_documents, plant_each_kind
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)

pytestmark = pytest.mark.slow

TARGETS = ["tantivy", "opensearch"]
COUNTED = ("missing", "extra", "stale", "duplicates", "unbuildable")


def counts(report: VerifyReport) -> dict[str, int]:
    return {k: getattr(report, k) for k in COUNTED}


def on_target(request: pytest.FixtureRequest, path: Path, target: str) -> Pipeline:
    """The pipeline at *path*, pointed at osmem (the test double) for ``opensearch``."""
    if target == "opensearch":
        cluster = request.getfixturevalue("osmem_cluster")
        url = cluster.opensearch_url
        text = path.read_text(encoding="utf-8").replace("  url: tantivy://index\n", f"  url: {url}\n")
        path.write_text(text, encoding="utf-8")
    return load_pipeline(path)


@pytest.fixture(params=TARGETS)
def sqlite_shop(request: pytest.FixtureRequest, tmp_path: Path) -> Pipeline:
    make_shop(tmp_path, products=500, partition_size=100)
    return on_target(request, tmp_path / "pipeline.yaml", request.param)


def hostile_rows(n: int) -> list[tuple[Any, ...]]:
    rng = random.Random(9)
    keys = icu_keys(n // 2)
    return [(k, b, None if rng.random() < 0.3 else f"note {k!r}") for k in keys for b in (1, 2)]


@pytest.fixture(params=[pytest.param(t, marks=pytest.mark.postgres) for t in TARGETS])
def postgres_hostile(request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str]) -> Iterator[Pipeline]:
    ddl = 'a text COLLATE "en-US-x-icu" NOT NULL, b integer NOT NULL, note text, PRIMARY KEY (a, b)'
    with pg_table(services["postgres"], ddl, hostile_rows(2400), "verify") as table:
        write_pipeline(tmp_path, services["postgres"], "labels", table, "    partition_size: 300\n")
        yield on_target(request, tmp_path / "pipeline.yaml", request.param)


def integer_rows(n: int) -> list[tuple[Any, ...]]:
    keys = icu_keys(n)
    return [(i * 7, keys[i], None if i % 4 == 0 else f"note {keys[i]!r}", i * 0.25) for i in range(n)]


@pytest.fixture(params=[pytest.param(t, marks=pytest.mark.postgres) for t in TARGETS])
def postgres_integer(request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str]) -> Iterator[Pipeline]:
    """Integer keys, hostile text beside them: PostgreSQL sums each range's checks itself."""
    ddl = 'id bigint PRIMARY KEY, label text COLLATE "en-US-x-icu", note text, weight double precision'
    with pg_table(services["postgres"], ddl, integer_rows(2400), "verify") as table:
        write_pipeline(tmp_path, services["postgres"], "labels", table, "    partition_size: 300\n")
        yield on_target(request, tmp_path / "pipeline.yaml", request.param)


def reindex(pipeline: Pipeline, spark: Any) -> str:
    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    with open_store(pipeline) as store:
        assert summary.status == "COMPLETED", store.job_rows.job(summary.job_id).error_message
    return summary.index


def verify_then_repair(
    pipeline: Pipeline, spark: Any, alias: str, extra_key: tuple[Any, ...], path: str = CHECKSUMS
) -> None:
    """Plant every kind of drift after a reindex; verify must find exactly it, by *path*, and
    repair must leave the index clean."""
    index = reindex(pipeline, spark)
    [clean] = run_verify(pipeline, spark_factory=lambda: spark).reports
    assert clean.clean and clean.path == path, clean.path_reason
    if path == CHECKSUMS:  # a clean index: every range matched, no document compared by id
        assert clean.ranges["matched"] == clean.ranges["compared"] == clean.ranges["source"] > 3, clean.ranges
    docs = built_documents(pipeline, alias)
    ids = sorted(docs)
    duplicate = ids[30] if pipeline.target.url.startswith("tantivy") else None
    planted = plant_each_kind(pipeline, index, docs, (ids[10], ids[20], ids[25], duplicate), extra_key)
    n = len(docs)

    [found] = run_verify(pipeline, spark_factory=lambda: spark).reports
    assert counts(found) == {**planted.counts(), "unbuildable": 0}, found.samples
    assert {k: v for k, v in found.samples.items() if v} == {k: v for k, v in planted.samples().items() if v}
    assert (found.checked, found.index_docs) == (n, n + planted.counts()["duplicates"])
    assert found.ranges["source"] > 3 and found.path == path, found.ranges
    if path == CHECKSUMS:  # the extra document is found by its key in its range: no index range scanned
        assert 1 <= found.ranges["descended"] <= 4 and found.ranges["matched"] >= 1, found.ranges
        assert found.ranges["index"] == 0, found.ranges
    else:
        assert found.ranges["index"] >= 1, found.ranges

    outcome = run_verify(pipeline, repair_drift=True, spark_factory=lambda: spark)
    [before], [after] = outcome.before or [], outcome.reports
    assert counts(before) == counts(found)
    assert after.clean and counts(after) == dict.fromkeys(COUNTED, 0), after.samples
    assert (after.index_docs, after.checked, outcome.exit_code) == (n, n, 0)
    with open_store(pipeline) as store:
        latest = store.verify_runs.latest(alias)
    assert latest is not None and (latest.status, latest.repair, latest.run_id) == ("clean", True, outcome.run_id)


def test_verify_and_repair_on_spark_sqlite(sqlite_shop: Pipeline, spark: Any) -> None:
    verify_then_repair(sqlite_shop, spark, "products", (10**9,))


def test_verify_and_repair_on_spark_postgres_hostile_keys(postgres_hostile: Pipeline, spark: Any) -> None:
    """Text keys under ICU: the index orders them by bytes, so the ranges are compared by id."""
    verify_then_repair(postgres_hostile, spark, "labels", ("a-B|\\é", 3), path=DOCUMENTS)


def test_verify_and_repair_on_spark_postgres_checksums_in_the_database(postgres_integer: Pipeline, spark: Any) -> None:
    verify_then_repair(postgres_integer, spark, "labels", (10**9,))


def test_cli_verify_repair_json_contract(tmp_path: Path, spark: Any, cli: Path) -> None:
    """``verify --repair --json`` as the server calls it: the contract's keys at the top (after
    the repair), both passes, exit 0 once clean; bars on stderr, one JSON line on stdout."""
    pipeline = make_shop(tmp_path, products=300, partition_size=100)
    index = reindex(pipeline, spark)
    docs = built_documents(pipeline, "products")
    plant_each_kind(pipeline, index, docs, ("11", "12", "13", "14"), (-5,))
    run = run_cli(cli, "verify", "-c", str(tmp_path / "pipeline.yaml"), "--repair", "--json")
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.strip().splitlines()) == 1, run.stdout
    body = orjson.loads(run.stdout)
    contract = {"missing": 0, "extra": 0, "stale": 0, "duplicates": 0, "index_docs": 300, "checked": 300}
    assert {k: body[k] for k in contract} == contract
    assert {k: body["before"][k] for k in ("missing", "extra", "stale", "duplicates")} == dict.fromkeys(
        ("missing", "extra", "stale", "duplicates"), 1
    )
    assert body["repair"] == {"indexed": 3, "deleted": 2, "failed": 0}
    assert body["clean"] is True and body["aliases"]["products"]["index"] == index
    assert body["aliases"]["products"]["path"] == body["before"]["aliases"]["products"]["path"] == "checksums"
    assert "repaired: products" in run.stderr and "ranges" in run.stderr
    assert "compared by checksum: 3 of 3 ranges matched" in run.stderr, run.stderr
