"""Resume after a crash: SIGKILL a reindex at about half way, rerun it, compare with a full run.

Why: sparkindex's promise is that a rebuild is resumable, so after a crash at 50 % the rerun
should cost about half a full run plus start-up (the target: <= 0.6x), and the index must
still equal the source (verify: missing 0, duplicates 0). A graceful stop would prove nothing:
the kill is a SIGKILL of the whole process tree (driver, Spark JVM, Python workers and their
process groups) at once, so nothing gets to flush, release or say goodbye.

"Half way" is read from the coordination store, the same place the rerun resumes from: the sum
of the partitions' acknowledged ``success_count`` for the killed job. The tables are found by
name suffix (``..si_partition``, ``..si_job``) with plain SQL, so the query survives refactors
of the store's Python API.

    BENCH=resume BENCH_RESUME_ROWS=500000 .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.large import large_dataset, run_cli, spawn_reindex
from bench.memory import kill_tree
from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url


class AckProbe:
    """Acknowledged documents of the newest job in a coordination store, by plain SQL."""

    def __init__(self, url: str, prefix: str) -> None:
        self.engine = sa.create_engine(normalize_url(url))
        self.prefix = prefix
        self.job: sa.Table | None = None
        self.partition: sa.Table | None = None

    def _tables(self) -> bool:
        if self.partition is not None:
            return True
        names = sa.inspect(self.engine).get_table_names()
        part = [n for n in names if n.startswith(self.prefix) and n.endswith("partition")]
        job = [n for n in names if n.startswith(self.prefix) and n.endswith("_job")]
        if not part or not job:
            return False
        md = sa.MetaData()
        self.partition = sa.Table(min(part, key=len), md, autoload_with=self.engine)
        self.job = sa.Table(min(job, key=len), md, autoload_with=self.engine)
        return True

    def acknowledged(self, not_job: str | None) -> tuple[str | None, int]:
        """(newest job id other than *not_job*, its acknowledged documents); (None, 0) before it exists."""
        try:
            if not self._tables():
                return None, 0
            assert self.job is not None and self.partition is not None
            with self.engine.connect() as conn:
                q = sa.select(self.job.c.id).order_by(self.job.c.created_at.desc()).limit(1)
                job_id = conn.execute(q).scalar()
                if job_id is None or job_id == not_job:
                    return None, 0
                t = self.partition
                done = conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(t.c.success_count), 0)).where(t.c.job_id == job_id)
                ).scalar()
            return str(job_id), int(done or 0)
        except sa.exc.SQLAlchemyError:  # the driver is creating the schema or holds a write lock
            return None, 0

    def states(self, job_id: str) -> dict[str, int]:
        """Partitions per status: what the rerun finds (how much is done, how much half-done)."""
        if not self._tables():
            return {}
        assert self.partition is not None
        t = self.partition
        with self.engine.connect() as conn:
            q = sa.select(t.c.status, sa.func.count()).where(t.c.job_id == job_id).group_by(t.c.status)
            return {str(status): int(n) for status, n in conn.execute(q)}

    def close(self) -> None:
        self.engine.dispose()


def kill_at(pipeline: Path, rows: int, fraction: float, not_job: str | None, timeout: float = 3600) -> dict[str, Any]:
    """Start ``reindex --new``; SIGKILL its whole process tree once *fraction* of *rows* are acknowledged."""
    p = load_pipeline(pipeline)
    probe = AckProbe(p.coordination_url(), p.coordination.prefix)
    proc = spawn_reindex(pipeline)
    t0 = time.perf_counter()
    try:
        while True:
            job_id, acked = probe.acknowledged(not_job)
            if acked >= fraction * rows:
                kill_tree(proc.pid, str(pipeline.parent))
                proc.wait()
                states = probe.states(str(job_id))
                return {
                    "killed_at_pct": round(100 * acked / rows, 1),
                    "killed_after_s": round(time.perf_counter() - t0, 2),
                    "killed_job": job_id,
                    "partitions_at_kill": states,
                }
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended (exit {proc.returncode}) before {fraction:.0%} was acknowledged")
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError("timed out waiting for half of the documents")
            time.sleep(0.1)
    finally:
        kill_tree(proc.pid, str(pipeline.parent))
        probe.close()


def bench_resume(rows: int | None = None, source: str | None = None, fraction: float = 0.5) -> dict[str, Any]:
    rows = rows or int(os.environ.get("BENCH_RESUME_ROWS", os.environ.get("BENCH_LARGE_ROWS", "500000")))
    source = source or os.environ.get("BENCH_RESUME_SOURCE", "postgres")
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-resume-"))
    try:
        with large_dataset(source, rows, work) as pipeline:
            full = run_cli(pipeline, "reindex", "--new")
            if full.summary.get("indexed") != rows:
                raise RuntimeError(f"the full run did not index {rows} documents: {full.summary}")
            killed = kill_at(pipeline, rows, fraction, str(full.summary.get("job_id")))
            rerun = run_cli(pipeline, "reindex")
            if rerun.summary.get("indexed") != rows or rerun.summary.get("status") != "COMPLETED":
                raise RuntimeError(f"the rerun did not complete with {rows} documents: {rerun.summary}")
            verify = run_cli(pipeline, "verify").summary
        return {
            "bench": "resume",
            "source": source,
            "rows": rows,
            "full_s": round(full.seconds, 2),
            "rerun_s": round(rerun.seconds, 2),
            "full_job_s": full.summary.get("seconds"),  # the jobs' own clocks, without process start-up
            "rerun_job_s": rerun.summary.get("seconds"),
            "ratio": round(rerun.seconds / full.seconds, 3),
            **killed,
            "resumed_same_job": rerun.summary.get("job_id") == killed["killed_job"],
            "verify": {k: v for k, v in verify.items() if k != "aliases"},
            "load_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import orjson

    print(orjson.dumps(bench_resume()).decode(), flush=True)
