"""A reindex on a real Spark standalone cluster (master + 2 workers), PostgreSQL as source and store."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sparkindex.config import load_pipeline
from sparkindex.coordination.states import PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from tests.cli_process import LoggedProcess
from tests.cluster.standalone import StandaloneCluster
from tests.e2e.shop import copy_shop, fresh_database, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.postgres]
P = PartitionStatus
ROWS = 20_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path / "cluster").start()
    try:
        yield c
    finally:
        c.stop()


def test_cluster_reindex_survives_a_worker_kill_and_refuses_a_second_run(
    tmp_path: Path, cli: Path, services: dict[str, str], cluster: StandaloneCluster
) -> None:
    generate_shop(tmp_path / "shop.db", ROWS)
    url = fresh_database(services["postgres"], "cluster_shop")
    copy_shop(tmp_path / "shop.db", url)
    text = (
        PIPELINE_YAML.format(partition_size=500)
        .replace("url: sqlite:///shop.db", f"url: {url}")
        .replace("url: sqlite:///.sparkindex/state.db", f"url: {url}\n  prefix: cluster_")
        .replace("master: local[*,4]", f"master: {cluster.url}\n  conf:\n    spark.task.maxFailures: '8'")
        .replace("  batch_size: 25000\n", "  batch_size: 200\n")
        .replace("    complexity: 3.0\n", "    complexity: 3.0\n    page_size: 200\n")
    )
    config = tmp_path / "pipeline.yaml"
    config.write_text(text, encoding="utf-8")
    pipeline = load_pipeline(config)
    store = CoordinationStore(pipeline.coordination_url(), "cluster_")

    first = LoggedProcess(
        [str(cli), "reindex", "-c", str(config), "--json"], config.parent / "logs", start_new_session=True
    )
    try:

        def underway() -> bool:
            jobs = store.job_rows.jobs(["products"])
            return bool(jobs) and len(store.partition_rows.partitions(jobs[0].id, [P.COMPLETED])) >= 2

        wait_for(underway, 400, "the first run to complete two partitions", every=0.1)

        # Kill one worker JVM mid-job, at once (a second CLI's start-up first gave a faster job the
        # time to finish); its executor goes with it and Spark reschedules the tasks.
        job_id = store.job_rows.jobs(["products"])[0].id
        assert store.partition_rows.partitions(job_id, [P.PENDING, P.PROCESSING]), "the kill must land mid-job"
        os.kill(cluster.worker(0).pid, signal.SIGKILL)

        # A second run for the same alias refuses cleanly while the first, recovering, holds the lock.
        second = subprocess.run(
            [str(cli), "reindex", "-c", str(config), "--json"], capture_output=True, text=True, timeout=300
        )
        assert second.returncode == 3, second.stderr
        assert "locked by" in second.stderr and "products" in second.stderr
        out, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 0, err[-3000:]
    summary = orjson.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "COMPLETED"
    assert summary["indexed"] == summary["source_rows"] == ROWS

    # The alias was swapped exactly once: one entry, no history of an earlier swap.
    catalogue = orjson.loads((tmp_path / "index" / "aliases.json").read_bytes())
    assert catalogue["products"]["index"] == summary["index"] and catalogue["products"]["history"] == []

    verify = subprocess.run(
        [str(cli), "verify", "-c", str(config), "--json"], capture_output=True, text=True, timeout=600
    )
    assert verify.returncode == 0, verify.stderr
    report = orjson.loads(verify.stdout.strip().splitlines()[-1])
    assert (report["missing"], report["extra"], report["stale"], report["checked"]) == (0, 0, 0, ROWS)
