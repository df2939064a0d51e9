"""The shop reindexed into OpenSearch end to end, through the real CLI on Spark local mode.

Every result here depends on osmem-server, an in-memory OpenSearch-compatible TEST DOUBLE (no real
OpenSearch can be installed on this machine): it applies writes at once (refresh is a no-op), has
one node, and is slow (hence small shops). What these tests prove is sparkindex's side: the
requests it sends (settings, mappings, versions, routing) and what it does with the answers.
"""

from __future__ import annotations

import sqlite3
import subprocess
import urllib.error
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.config import load_pipeline
from sparkindex.coordination.states import PartitionStatus
from sparkindex.resources import open_store
from tests.e2e.shop import execute, make_shop
from tests.e2e.test_crashes import kill_driver_mid_job  # the same real-process kill as the Tantivy crash tests
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)
from tests.support.osmem import OsmemCluster

pytestmark = pytest.mark.slow
P = PartitionStatus


# -- helpers -----------------------------------------------------------------------------------------------
def shop_on_osmem(
    directory: Path, cluster: OsmemCluster, products: int, partition_size: int, index_yaml: str = "", **kw: Any
) -> Path:
    """The sample shop with its pipeline pointed at *cluster* (osmem, a test double); *index_yaml*
    is inserted into the index's block."""
    make_shop(directory, products, partition_size, **kw)
    path = directory / "pipeline.yaml"
    text = path.read_text(encoding="utf-8")
    text = text.replace("  url: tantivy://index\n", f"  url: {cluster.opensearch_url}\n")
    text = text.replace("    complexity: 3.0\n", "    complexity: 3.0\n" + index_yaml)
    path.write_text(text, encoding="utf-8")
    return path


def run(cli: Path, *args: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    """Run ``sparkindex`` with ``--json``: (exit code, the last line's JSON, stderr)."""
    res = subprocess.run([str(cli), *args, "--json"], capture_output=True, text=True, timeout=timeout)
    lines = res.stdout.strip().splitlines()
    assert lines, f"no JSON from {args}: {res.stderr}"
    return res.returncode, orjson.loads(lines[-1]), res.stderr


def reindex(cli: Path, pipeline: Path) -> tuple[int, dict[str, Any], str]:
    return run(cli, "reindex", "-c", str(pipeline))


def verify(cli: Path, pipeline: Path) -> tuple[int, dict[str, Any]]:
    code, report, _ = run(cli, "verify", "-c", str(pipeline), timeout=300)
    return code, report


def sql(db: Path, query: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def doc(cluster: OsmemCluster, index: str, doc_id: str, routing: str | None = None) -> dict[str, Any]:
    from urllib.parse import quote

    path = f"/{index}/_doc/{quote(doc_id, safe='')}" + (f"?routing={quote(routing, safe='')}" if routing else "")
    got = cluster.request("GET", path)
    assert isinstance(got, dict)
    return got


def search(cluster: OsmemCluster, index: str, body: dict[str, Any]) -> dict[str, Any]:
    got = cluster.request("POST", f"/{index}/_search", body)
    assert isinstance(got, dict)
    return got


def alias_indexes(cluster: OsmemCluster, alias: str) -> set[str]:
    try:
        found = cluster.request("GET", f"/_alias/{alias}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()
        raise
    assert isinstance(found, dict)
    return set(found)


def hit_ids(answer: dict[str, Any]) -> set[str]:
    return {h["_id"] for h in answer["hits"]["hits"]}


# -- the shop ------------------------------------------------------------------------------------------------
SETTINGS_YAML = """\
    settings:
      number_of_shards: 2
      refresh_interval: 2s
      analysis:
        analyzer:
          folded: {type: custom, tokenizer: standard, filter: [lowercase, asciifolding]}
    mapping:
      properties:
        name: {analyzer: folded}
        reviews:
          properties:
            body: {analyzer: folded}
"""


def test_shop_reindexes_verifies_clean_and_a_second_run_moves_the_alias(
    tmp_path: Path, cli: Path, osmem_cluster: OsmemCluster
) -> None:
    """On osmem (a test double): settings and the mapping override reach the index; the alias
    moves to _v2 on the second run and _v1 is kept (keep_versions: 2)."""
    pipeline = shop_on_osmem(tmp_path, osmem_cluster, products=600, partition_size=150, index_yaml=SETTINGS_YAML)
    execute(tmp_path / "shop.db", "UPDATE products SET name = 'Crème Brûlée; TORCH, Deluxe (v2)' WHERE id = 7")

    code, summary, err = reindex(cli, pipeline)
    assert code == 0, err
    assert (summary["status"], summary["index"], summary["failed"]) == ("COMPLETED", "products_v1", 0)
    assert summary["indexed"] == summary["source_rows"] == 600

    settings = osmem_cluster.request("GET", "/products_v1/_settings")
    assert isinstance(settings, dict)
    own = settings["products_v1"]["settings"]["index"]
    # the index's own settings, restored after the bulk load ran without refresh
    assert (own["number_of_shards"], own["refresh_interval"]) == ("2", "2s")
    assert own["analysis"]["analyzer"]["folded"]["filter"] == ["lowercase", "asciifolding"]
    mapping = osmem_cluster.request("GET", "/products_v1/_mapping")
    assert isinstance(mapping, dict)
    props = mapping["products_v1"]["mappings"]["properties"]
    assert props["name"]["analyzer"] == "folded" and props["name"]["copy_to"] == ["all_text"]
    assert props["reviews"]["type"] == "nested" and props["reviews"]["properties"]["body"]["analyzer"] == "folded"
    # the folding analyzer at work, through the alias
    assert hit_ids(search(osmem_cluster, "products", {"query": {"match": {"name": "creme brulee"}}})) == {"7"}

    code, report = verify(cli, pipeline)
    assert code == 0, report
    assert (report["missing"], report["extra"], report["stale"], report["duplicates"]) == (0, 0, 0, 0)
    assert report["index_docs"] == report["checked"] == 600

    execute(tmp_path / "shop.db", "DELETE FROM reviews WHERE product_id = 8")
    execute(tmp_path / "shop.db", "DELETE FROM products WHERE id = 8")
    code, summary, err = reindex(cli, pipeline)
    assert code == 0, err
    assert (summary["index"], summary["indexed"]) == ("products_v2", 599)
    assert alias_indexes(osmem_cluster, "products") == {"products_v2"}
    kept = osmem_cluster.request("GET", "/products_v1/_count")
    assert isinstance(kept, dict) and kept["count"] == 600, "the previous version is kept, untouched"
    code, report = verify(cli, pipeline)
    assert code == 0 and report["index_docs"] == 599


def test_driver_killed_mid_job_then_rerun_finishes_clean(
    tmp_path: Path, cli: Path, osmem_cluster: OsmemCluster
) -> None:
    """SIGKILL of the driver (and its process group: Spark's JVM and Python workers) mid-job on
    osmem (a test double); the rerun resumes the same job, never redoes completed partitions."""
    pipeline = shop_on_osmem(tmp_path, osmem_cluster, 3000, 100, batch_size=50, page_size=50)
    with open_store(load_pipeline(pipeline)) as store:
        job, before, completed = kill_driver_mid_job(cli, pipeline, store)
        assert alias_indexes(osmem_cluster, "products") == set(), "no alias before the job completes"

        code, summary, err = reindex(cli, pipeline)
        assert code == 0, err
        assert (summary["job_id"], summary["status"], summary["index"]) == (job.id, "COMPLETED", "products_v1")
        assert summary["indexed"] == summary["source_rows"] == 3000
        after = {p.id: p for p in store.partition_rows.partitions(job.id)}
        for pid in completed:
            assert after[pid].claims == before[pid].claims == 1, "a completed partition was read again"
        code, report = verify(cli, pipeline)
        assert code == 0, report
        assert (report["missing"], report["extra"], report["stale"], report["duplicates"], report["checked"]) == (
            0,
            0,
            0,
            0,
            3000,
        )


def test_a_document_the_server_rejects_is_dead_lettered_with_exit_code_1(
    tmp_path: Path, cli: Path, osmem_cluster: OsmemCluster
) -> None:
    """The mapping override makes `description` a long; one row holds text there: osmem (a test
    double) rejects that document alone (mapper_parsing_exception), the job completes with errors."""
    override = "    mapping:\n      properties:\n        description: {type: long}\n"
    pipeline = shop_on_osmem(tmp_path, osmem_cluster, products=300, partition_size=100, index_yaml=override)
    execute(tmp_path / "shop.db", "UPDATE products SET description = NULL")
    execute(tmp_path / "shop.db", "UPDATE products SET description = 'forty-two, not 42' WHERE id = 42")

    code, summary, err = reindex(cli, pipeline)
    assert code == 1, err
    assert (summary["status"], summary["failed"], summary["indexed"]) == ("COMPLETED_WITH_ERRORS", 1, 299)
    _, dlq, _ = run(cli, "dlq", "list", "-c", str(pipeline))
    (letter,) = dlq["dead_letters"]
    assert (letter["doc_id"], letter["error_class"]) == ("42", "mapper_parsing_exception")
    assert "description" in letter["error_message"]
    code, report = verify(cli, pipeline)
    assert code == 1 and report["missing"] == 1 and report["aliases"]["products"]["samples"]["missing"] == ["42"]
