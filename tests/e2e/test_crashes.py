"""Crashes with real SIGKILLs: the driver mid-job, a Python worker mid-partition."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import orjson
import pytest

from sparkindex.coordination.records import JobRecord, PartitionRecord
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.resources import open_store
from tests.cli_process import LoggedProcess
from tests.e2e.shop import make_shop, wait_for

pytestmark = pytest.mark.slow
P = PartitionStatus


def _start(cli: Path, pipeline: Path) -> LoggedProcess:
    return LoggedProcess(
        [str(cli), "reindex", "-c", str(pipeline), "--json"], pipeline.parent / "logs", start_new_session=True
    )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _verify(cli: Path, pipeline: Path) -> dict[str, int]:
    run = subprocess.run(
        [str(cli), "verify", "-c", str(pipeline), "--json"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    report: dict[str, int] = orjson.loads(run.stdout.strip().splitlines()[-1])
    return report


def kill_driver_mid_job(
    cli: Path, pipeline_path: Path, store: CoordinationStore
) -> tuple[JobRecord, dict[str, PartitionRecord], set[str]]:
    """Start a reindex, SIGKILL its driver (and its process group: the JVM, the Python workers)
    once three partitions are done; return the job, its partitions then, and the completed ones."""
    proc = _start(cli, pipeline_path)
    try:

        def some_done() -> bool:
            proc.assert_running("the reindex")  # one that ended (crashed, or done) never gets there
            jobs = store.job_rows.jobs(["products"])
            return bool(jobs) and len(store.partition_rows.partitions(jobs[0].id, [P.COMPLETED])) >= 3

        wait_for(some_done, 300, "three completed partitions")
        os.kill(proc.pid, signal.SIGKILL)  # kill -9 of the driver...
    finally:
        _kill_group(proc)  # ...and whatever it left behind, as when its machine dies
    job = store.job_rows.jobs(["products"])[0]
    before = {p.id: p for p in store.partition_rows.partitions(job.id)}
    completed = {pid for pid, p in before.items() if p.status == P.COMPLETED}
    assert 3 <= len(completed) < len(before), "the kill must land mid-job"
    assert store.job_rows.job(job.id).status == JobStatus.RUNNING  # nobody recorded an end: a real crash
    return job, before, completed


def test_driver_killed_mid_job_then_rerun_resumes(tmp_path: Path, cli: Path) -> None:
    pipeline = make_shop(tmp_path, products=12_000, partition_size=600, batch_size=200, page_size=200)
    with open_store(pipeline) as store:
        job, before, completed = kill_driver_mid_job(cli, tmp_path / "pipeline.yaml", store)

        rerun = subprocess.run(
            [str(cli), "reindex", "-c", str(tmp_path / "pipeline.yaml"), "--json"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert rerun.returncode == 0, rerun.stderr
        summary = orjson.loads(rerun.stdout.strip().splitlines()[-1])
        assert summary["job_id"] == job.id, "the rerun resumes the same job"
        assert summary["status"] == "COMPLETED"
        assert summary["indexed"] == summary["source_rows"] == 12_000

        after = {p.id: p for p in store.partition_rows.partitions(job.id)}
        assert all(p.status == P.COMPLETED for p in after.values())
        for pid in completed:  # completed partitions were never read again
            assert after[pid].claims == before[pid].claims == 1
        for pid, p in before.items():  # in-flight ones resumed from their cursor: counts only grow by the rest
            if p.status != P.COMPLETED:
                assert after[pid].success_count == after[pid].estimated_count or after[pid].success_count > 0
        report = _verify(cli, tmp_path / "pipeline.yaml")
        drift = (report["missing"], report["extra"], report["stale"], report["duplicates"], report["checked"])
        assert drift == (0, 0, 0, 0, 12_000)


def test_python_worker_killed_mid_partition(tmp_path: Path, cli: Path) -> None:
    # enough partitions that some are left to Spark's tasks after the driver's head start
    pipeline = make_shop(
        tmp_path, products=80_000, partition_size=4000, batch_size=100, page_size=100, sync_every_s=0.05
    )  # partitions long enough (about a second) that the kill lands before the one chosen ends
    with open_store(pipeline) as store:
        proc = _start(cli, tmp_path / "pipeline.yaml")
        victim: dict[str, object] = {}
        try:

            def mid_partition() -> bool:
                proc.assert_running("the reindex")
                jobs = store.job_rows.jobs(["products"])
                parts = store.partition_rows.partitions(jobs[0].id) if jobs else []  # one read: one consistent state
                if not parts:
                    return False  # not planned yet
                to_come = False  # whether a task may still be found before half-way through a partition
                for p in parts:
                    # a Spark task's partition (host:pid:run:taskN.A), not one the driver runs while
                    # the JVM starts (…:driver): the victim is a Python worker
                    task = p.owner is not None and ":task" in p.owner
                    if p.status != P.PROCESSING or not task or p.success_count >= p.estimated_count // 2:
                        continue
                    if p.cursor is not None:
                        victim.update(pid=p.id, owner=p.owner, cursor=p.cursor)
                        return True
                    to_come = True  # claimed, no cursor yet
                if to_come or any(p.status in (P.PENDING, P.CLOSED) for p in parts):
                    return False
                # Nothing left to claim and no task short of half-way: the window has passed for good
                # (the driver's head start took most partitions while the JVM started: a fast machine).
                owners = [(p.owner or "").rsplit(":", 1)[-1] for p in parts]
                raise AssertionError(
                    f"no partition is left for a Spark task to be killed in: of {len(parts)} partitions, the driver "
                    f"took {owners.count('driver')} while the JVM started, and no task's is short of half-way: "
                    f"{[(str(p.status), p.owner, p.success_count, p.estimated_count) for p in parts]}"
                )

            wait_for(mid_partition, 300, "a partition half-way through")
            worker_pid = int(str(victim["owner"]).split(":")[1])  # host:pid:run:task
            os.kill(worker_pid, signal.SIGKILL)  # the Python worker reading, building and writing that partition
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                _kill_group(proc)
        assert proc.returncode == 0, err
        summary = orjson.loads(out.strip().splitlines()[-1])
        assert summary["status"] == "COMPLETED" and summary["indexed"] == 80_000
        killed = store.partition_rows.partition(str(victim["pid"]))
        assert killed.status == P.COMPLETED
        assert killed.claims >= 2, "a retry claimed the partition again after the kill"
        # its stages: those acknowledged before the kill (kept: the retry went on from the cursor),
        # then the retry's; counted once each, whatever the dead worker had staged beyond the cursor
        claims = {int(name.split(".")[1]) for name in killed.stage_names}
        assert len(claims) >= 2, killed.stage_names
        report = _verify(cli, tmp_path / "pipeline.yaml")
        assert (report["missing"], report["extra"], report["stale"], report["duplicates"]) == (0, 0, 0, 0)
