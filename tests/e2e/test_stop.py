"""A graceful stop: STOPPING -> STOPPED with exit code 3, then a rerun resumes the same job."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import orjson
import pytest

from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.resources import open_store
from tests.cli_process import LoggedProcess
from tests.e2e.shop import make_shop, wait_for

pytestmark = pytest.mark.slow
P = PartitionStatus


def _writer_end(fifo: Path, reader: LoggedProcess, held: list[int]) -> bool:
    """Open the write end of *fifo* once *reader* has opened its read end. Non-blocking: an open
    that waited for a reader would hang the test if the reader died first."""
    reader.assert_running("sparkindex stop")
    try:
        held.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet: it is still starting
            return False
        raise
    return True


def test_stop_then_resume(tmp_path: Path, cli: Path) -> None:
    rows = 20_000  # 40 partitions: when the stop lands (two done), dozens are still to run
    pipeline = make_shop(tmp_path, products=rows, partition_size=500, batch_size=100, page_size=100)
    config = str(tmp_path / "pipeline.yaml")
    with open_store(pipeline) as store:
        # The real `sparkindex stop`, started first and held at its read of the pipeline file: a FIFO
        # beside the real one (relative paths resolve alike) that the test fills when two partitions
        # are done. Interpreter start-up and imports (most of its second or so, and not faster in step
        # with the partitions on a fast machine) are behind it then; what is left (parse the file, open
        # the store, write STOPPING) is a tenth of that. Started only then, it raced the remaining
        # partitions, and a fast machine finished them all first.
        gate = tmp_path / "stop-gate.yaml"
        os.mkfifo(gate)
        stop = LoggedProcess([str(cli), "stop", "-c", str(gate)], tmp_path / "logs")
        held: list[int] = []
        try:
            wait_for(lambda: _writer_end(gate, stop, held), 300, "`sparkindex stop` to open its pipeline file")
            proc = LoggedProcess([str(cli), "reindex", "-c", config, "--json"], tmp_path / "logs")
            try:

                def running_with_progress() -> bool:
                    proc.assert_running("the reindex")
                    stop.assert_running("sparkindex stop")
                    jobs = store.job_rows.jobs(["products"])
                    return bool(jobs) and len(store.partition_rows.partitions(jobs[0].id, [P.COMPLETED])) >= 2

                wait_for(running_with_progress, 300, "two completed partitions")
                fd = held.pop()
                try:
                    os.write(fd, Path(config).read_bytes())  # a few hundred bytes: one write into an empty pipe
                finally:
                    os.close(fd)  # end of file: the stop goes on
                stop.wait(timeout=60)
                assert stop.returncode == 0, stop.stderr_text()
                assert "STOPPING" in stop.stderr_text(), stop.stderr_text()
                out, err = proc.communicate(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
        finally:
            for fd in held:
                os.close(fd)
            if stop.poll() is None:
                stop.kill()
                stop.wait(timeout=60)
        assert proc.returncode == 3, err
        stopped = orjson.loads(out.strip().splitlines()[-1])
        assert stopped["status"] == "STOPPED"
        job = store.job_rows.job(stopped["job_id"])
        assert job.status == JobStatus.STOPPED
        parts = store.partition_rows.partitions(job.id)
        done = {p.id for p in parts if p.status == P.COMPLETED}
        assert 2 <= len(done) < len(parts), "the stop must land mid-job"
        assert not [p for p in parts if p.status == P.PROCESSING], "stopped tasks hand their partitions back"

        rerun = subprocess.run(
            [str(cli), "reindex", "-c", config, "--json"], capture_output=True, text=True, timeout=600
        )
        assert rerun.returncode == 0, rerun.stderr
        summary = orjson.loads(rerun.stdout.strip().splitlines()[-1])
        assert summary["job_id"] == job.id and summary["status"] == "COMPLETED"
        assert summary["indexed"] == summary["source_rows"] == rows
        after = {p.id: p for p in store.partition_rows.partitions(job.id)}
        assert all(after[pid].claims == 1 for pid in done)

        status = subprocess.run(
            [str(cli), "status", "-c", config, "--json"], capture_output=True, text=True, timeout=60
        )
        body = orjson.loads(status.stdout.strip().splitlines()[-1])
        assert body["status"] == "COMPLETED" and body["entities"]["products"]["success"] == rows
