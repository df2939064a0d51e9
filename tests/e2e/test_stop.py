"""A graceful stop: STOPPING -> STOPPED with exit code 3, then a rerun resumes the same job."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from sparkindex.coordination.states import JobStatus, PartitionStatus
from tests.cli_process import LoggedProcess
from tests.e2e.shop import make_shop, store_of, wait_for

pytestmark = pytest.mark.slow
P = PartitionStatus


def test_stop_then_resume(tmp_path: Path, cli: Path) -> None:
    pipeline = make_shop(tmp_path, products=10_000, partition_size=500, batch_size=100, page_size=100)
    config = str(tmp_path / "pipeline.yaml")
    store = store_of(pipeline)
    proc = LoggedProcess([str(cli), "reindex", "-c", config, "--json"], tmp_path / "logs")
    try:

        def running_with_progress() -> bool:
            jobs = store.jobs(["products"])
            return bool(jobs) and len(store.partitions(jobs[0].id, [P.COMPLETED])) >= 2

        wait_for(running_with_progress, 300, "two completed partitions")
        stop = subprocess.run([str(cli), "stop", "-c", config], capture_output=True, text=True, timeout=60)
        assert stop.returncode == 0, stop.stderr
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    stopped = orjson.loads(out.strip().splitlines()[-1])
    assert stopped["status"] == "STOPPED"
    job = store.job(stopped["job_id"])
    assert job.status == JobStatus.STOPPED
    parts = store.partitions(job.id)
    done = {p.id for p in parts if p.status == P.COMPLETED}
    assert 2 <= len(done) < len(parts), "the stop must land mid-job"
    assert not [p for p in parts if p.status == P.PROCESSING], "stopped tasks hand their partitions back"

    rerun = subprocess.run([str(cli), "reindex", "-c", config, "--json"], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    summary = orjson.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["job_id"] == job.id and summary["status"] == "COMPLETED"
    assert summary["indexed"] == summary["source_rows"] == 10_000
    after = {p.id: p for p in store.partitions(job.id)}
    assert all(after[pid].claims == 1 for pid in done)

    status = subprocess.run([str(cli), "status", "-c", config, "--json"], capture_output=True, text=True, timeout=60)
    body = orjson.loads(status.stdout.strip().splitlines()[-1])
    assert body["status"] == "COMPLETED" and body["entities"]["products"]["success"] == 10_000
