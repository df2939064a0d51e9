"""Index-to-index rebuilds: a pipeline whose source is an index, on real Spark and Tantivy.

The shop is indexed from SQLite once (``products_v1``, names analysed in English); a second
pipeline rebuilds the alias from that index with another analyzer, keeping every document's id,
sort key and content, and a search then behaves differently. A driver SIGKILLed mid-rebuild is
resumed by a rerun, and verify compares the rebuilt index with the one it came from. The
OpenSearch rebuild runs against osmem-server, an in-memory OpenSearch-compatible TEST DOUBLE.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import ConfigError
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source_url, open_store, open_target_url
from sparkindex.targets.base import BulkItem, StoredDocument
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from tests.cli_process import LoggedProcess
from tests.e2e.guarantee_helpers import run_cli
from tests.e2e.shop import make_shop, wait_for
from tests.support.osmem import *  # noqa: F403 (osmem_cluster: osmem-server, a test double)
from tests.support.osmem import OsmemCluster

pytestmark = pytest.mark.slow
P = PartitionStatus


def rebuild_pipeline(directory: Path, table: str = "products", index_yaml: str = "", job_yaml: str = "") -> Pipeline:
    """A pipeline beside the shop's that rebuilds alias ``products`` of the shop's index root
    from index *table* of the same root (paths relative to the file)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (
        "source:\n  url: tantivy://../shop/index\n"
        "target:\n  url: tantivy://../shop/index\n"
        "spark:\n  master: local[2,4]\n"
        f"indexes:\n  - alias: products\n    table: {table}\n{index_yaml}"
        f"job:\n  batch_size: 300\n{job_yaml}"
    )
    (directory / "pipeline.yaml").write_text(text, encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml")


def read_all(target: TantivyTarget, index: str) -> list[StoredDocument]:
    out: list[StoredDocument] = []
    while True:
        page = target.read_documents(index, after=out[-1].sort_key if out else None, size=1000)
        out.extend(page)
        if len(page) < 1000:
            return out


def verify(cli: Path, pipeline: Path) -> dict[str, Any]:
    run = run_cli(cli, "verify", "-c", str(pipeline), "--json", timeout=300)
    assert run.returncode == 0, run.stderr
    report: dict[str, Any] = orjson.loads(run.stdout.strip().splitlines()[-1])
    return report


def test_rebuild_with_another_analyzer_changes_search_and_keeps_documents(
    tmp_path: Path, spark: Any, cli: Path
) -> None:
    shop = make_shop(tmp_path / "shop", products=2000, partition_size=700)
    assert ReindexJob(shop, spark_factory=lambda: spark).run().status == "COMPLETED"
    with TantivyTarget(TantivyTargetConfig(root=tmp_path / "shop" / "index")) as target:
        assert target.mapping("products")["properties"]["name"]["analyzer"] == "english"
        stemmed = {h.id for h in target.search("products", "name:lamps", limit=5000)}
        exact = {h.id for h in target.search("products", "name:lamp", limit=5000)}
        assert stemmed and stemmed == exact  # english: "lamps" finds "lamp"

        pipeline = rebuild_pipeline(
            tmp_path / "rebuild",
            index_yaml="    partition_size: 300\n    page_size: 128\n    fields:\n      name: {analyzer: standard}\n",
        )
        summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert (summary.status, summary.index, summary.indexed, summary.failed) == ("COMPLETED", "products_v2", 2000, 0)
        assert target.alias_target("products") == "products_v2"
        assert target.list_versions("products") == ["products_v1", "products_v2"]  # the old one kept
        with open_store(pipeline) as store:
            jobs = store.job_rows.jobs(["products"])
            assert len(store.partition_rows.partitions(jobs[0].id)) >= 5  # planned from the index's key splits

        # the new mapping: the source index's, with the override; copy_to and the keyword sub-field stay
        name = target.mapping("products_v2")["properties"]["name"]
        assert name == {**target.mapping("products_v1")["properties"]["name"], "analyzer": "standard"}
        assert {h.id for h in target.search("products", "name:lamps", limit=5000)} == set()
        assert {h.id for h in target.search("products", "name:lamp", limit=5000)} == exact
        assert {h.id for h in target.search("products", "all_text:lamp", limit=5000)} >= exact  # copy_to still filled

        # every document kept its id, sort key and content; the hash, recomputed, is the same
        old, new = read_all(target, "products_v1"), read_all(target, "products_v2")
        assert len(new) == 2000
        assert [(d.id, d.sort_key, d.source, d.hash) for d in new] == [
            (d.id, d.sort_key, d.source, d.hash) for d in old
        ]

        # the alias now names the rebuilt version: verify compares it with the version it came from
        rebuild_pipeline(tmp_path / "check", table="products_v1")
        report = verify(cli, tmp_path / "check" / "pipeline.yaml")
        assert (report["missing"], report["extra"], report["stale"], report["duplicates"]) == (0, 0, 0, 0)
        assert report["checked"] == report["index_docs"] == 2000


def test_columns_choose_fields_and_verify_sees_drift(tmp_path: Path, spark: Any, cli: Path) -> None:
    shop = make_shop(tmp_path / "shop", products=600, partition_size=300)
    assert ReindexJob(shop, spark_factory=lambda: spark).run().status == "COMPLETED"
    pipeline = rebuild_pipeline(
        tmp_path / "slim", table="products_v1", index_yaml="    columns: [name, price]\n    partition_size: 250\n"
    )
    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert (summary.status, summary.indexed) == ("COMPLETED", 600)
    with TantivyTarget(TantivyTargetConfig(root=tmp_path / "shop" / "index")) as target:
        props = target.mapping("products_v2")["properties"]
        assert set(props) == {"name", "price", "all_text"}  # name copies into all_text: kept with it
        docs = read_all(target, "products_v2")
        assert all(set(d.source) == {"name", "price"} for d in docs) and len(docs) == 600
        old = {d.id: d for d in read_all(target, "products_v1")}
        assert all(d.sort_key == old[d.id].sort_key and d.hash != old[d.id].hash for d in docs)  # recomputed
        clean = verify(cli, tmp_path / "slim" / "pipeline.yaml")
        assert (clean["missing"], clean["extra"], clean["stale"], clean["checked"]) == (0, 0, 0, 600)

        # drift in the source index shows: one document rewritten, one deleted
        first, second = read_all(target, "products_v1")[:2]
        changed = dumps_document({**first.source, "name": "renamed"})
        target.bulk("products_v1", [BulkItem(first.id, changed, content_hash(changed), sort_key=first.sort_key)])
        target.bulk("products_v1", [BulkItem(second.id, op="delete")])
        target.finish_version("products_v1")
        run = run_cli(cli, "verify", "-c", str(tmp_path / "slim" / "pipeline.yaml"), "--json", timeout=300)
        assert run.returncode == 1, run.stderr
        report = orjson.loads(run.stdout.strip().splitlines()[-1])
        assert (report["stale"], report["extra"], report["missing"], report["checked"]) == (1, 1, 0, 599)


def test_a_rebuild_refuses_what_an_index_source_cannot_do(tmp_path: Path, spark: Any, cli: Path) -> None:
    shop = make_shop(tmp_path / "shop", products=50, partition_size=50)
    assert ReindexJob(shop, spark_factory=lambda: spark).run().status == "COMPLETED"
    cases = [
        ("nothing", "", "indexes[0].table: cannot read index 'nothing'"),
        ("products", "    id: [id]\n", "indexes[0].id: not available when the source is an index"),
        (
            "products",
            "    relations:\n      - {name: c, type: object, table: categories}\n",
            "indexes[0].relations: not available when the source is an index",
        ),
        ("products", "    columns: [name, colour]\n", "indexes[0].columns: no field 'colour' in index 'products'"),
        ("products", "    build: python\n", "indexes[0].build: documents from an index are copied"),
        ("products", "    fields:\n      colour: {analyzer: standard}\n", "indexes[0].fields.colour: no such field"),
    ]
    for i, (table, index_yaml, message) in enumerate(cases):
        pipeline = rebuild_pipeline(tmp_path / f"bad{i}", table=table, index_yaml=index_yaml)
        with (
            open_source_url(pipeline.source_url()) as source,
            pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")),
        ):
            resolve_plans(pipeline, source, ["products"])
    run = run_cli(cli, "reindex", "-c", str(tmp_path / "bad0" / "pipeline.yaml"), "--json", timeout=120)
    assert run.returncode == 2 and "cannot read index 'nothing'" in run.stderr, run.stderr


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def test_rebuild_killed_mid_way_resumes_on_rerun(tmp_path: Path, spark: Any, cli: Path) -> None:
    shop = make_shop(tmp_path / "shop", products=9000, partition_size=3000)
    assert ReindexJob(shop, spark_factory=lambda: spark).run().status == "COMPLETED"
    pipeline = rebuild_pipeline(
        tmp_path / "rebuild",
        index_yaml="    partition_size: 300\n    page_size: 100\n    fields:\n      name: {analyzer: standard}\n",
        job_yaml="  sync_every_s: 0.05\n",
    )
    path = tmp_path / "rebuild" / "pipeline.yaml"
    with open_store(pipeline) as store:
        proc = LoggedProcess(
            [str(cli), "reindex", "-c", str(path), "--json"], path.parent / "logs", start_new_session=True
        )
        try:

            def some_done() -> bool:
                jobs = store.job_rows.jobs(["products"])
                return bool(jobs) and len(store.partition_rows.partitions(jobs[0].id, [P.COMPLETED])) >= 3

            wait_for(some_done, 300, "three completed partitions")
            os.kill(proc.pid, signal.SIGKILL)  # the driver, then everything it started
        finally:
            _kill_group(proc)
        job = store.job_rows.jobs(["products"])[0]
        before = {p.id: p for p in store.partition_rows.partitions(job.id)}
        completed = {pid for pid, p in before.items() if p.status == P.COMPLETED}
        assert 3 <= len(completed) < len(before), "the kill must land mid-job"
        assert store.job_rows.job(job.id).status == JobStatus.RUNNING
        with TantivyTarget(TantivyTargetConfig(root=tmp_path / "shop" / "index")) as target:
            assert target.alias_target("products") == "products_v1", "readers still see the old version"

            rerun = run_cli(cli, "reindex", "-c", str(path), "--json")
            assert rerun.returncode == 0, rerun.stderr
            summary = orjson.loads(rerun.stdout.strip().splitlines()[-1])
            assert (summary["job_id"], summary["status"], summary["index"]) == (job.id, "COMPLETED", "products_v2")
            assert summary["indexed"] == 9000
            after = {p.id: p for p in store.partition_rows.partitions(job.id)}
            assert all(p.status == P.COMPLETED for p in after.values())
            for pid in completed:  # never read again
                assert after[pid].claims == before[pid].claims == 1
            assert target.alias_target("products") == "products_v2"
            assert not target.search("products", "name:lamps", limit=5)
            rebuild_pipeline(tmp_path / "check", table="products_v1")
            report = verify(cli, tmp_path / "check" / "pipeline.yaml")
            assert (report["missing"], report["extra"], report["stale"], report["checked"]) == (0, 0, 0, 9000)


def test_rebuild_on_opensearch_with_another_analyzer(
    tmp_path: Path, spark: Any, cli: Path, osmem_cluster: OsmemCluster
) -> None:
    """The same rebuild against OpenSearch; every result here depends on osmem-server, an
    in-memory OpenSearch-compatible TEST DOUBLE (its English stemming stands in for OpenSearch's)."""
    url = osmem_cluster.opensearch_url
    shop = make_shop(tmp_path / "shop", products=300, partition_size=150)
    yaml = tmp_path / "shop" / "pipeline.yaml"
    yaml.write_text(yaml.read_text(encoding="utf-8").replace("url: tantivy://index", f"url: {url}"), "utf-8")
    shop = load_pipeline(yaml)
    assert ReindexJob(shop, spark_factory=lambda: spark).run().status == "COMPLETED"
    with open_target_url(url, tmp_path) as target:

        def ids(query: str) -> set[str]:
            return {d.id for d in target.read_documents("products", size=1000, query=query)}

        assert ids("name:lamps") and ids("name:lamps") == ids("name:lamp")  # english stems "lamps"

        rebuild = tmp_path / "rebuild"
        rebuild.mkdir()
        (rebuild / "pipeline.yaml").write_text(
            f"source:\n  url: {url}\ntarget:\n  url: {url}\nspark:\n  master: local[2,4]\n"
            "indexes:\n  - alias: products\n    table: products\n    partition_size: 100\n    page_size: 64\n"
            "    fields:\n      name: {analyzer: standard}\n",
            encoding="utf-8",
        )
        summary = ReindexJob(load_pipeline(rebuild / "pipeline.yaml"), spark_factory=lambda: spark).run()
        assert (summary.status, summary.index, summary.indexed) == ("COMPLETED", "products_v2", 300)
        assert target.alias_target("products") == "products_v2"
        assert target.mapping("products")["properties"]["name"]["analyzer"] == "standard"
        assert ids("name:lamps") == set() and ids("name:lamp") == {
            d.id for d in target.read_documents("products_v1", size=1000, query="name:lamp")
        }
        old = target.read_documents("products_v1", size=1000)
        new = target.read_documents("products_v2", size=1000)
        assert [(d.id, d.sort_key, d.source, d.hash) for d in new] == [
            (d.id, d.sort_key, d.source, d.hash) for d in old
        ]

        check = tmp_path / "check"
        check.mkdir()
        (check / "pipeline.yaml").write_text(
            (rebuild / "pipeline.yaml")
            .read_text(encoding="utf-8")
            .replace("table: products\n", "table: products_v1\n"),
            encoding="utf-8",
        )
        report = verify(cli, check / "pipeline.yaml")
        assert (report["missing"], report["extra"], report["stale"], report["checked"]) == (0, 0, 0, 300)
