"""End-to-end reindex benchmarks against the naive loop: large nested documents and the shop.

Why end to end: a user runs ``sparkindex reindex``, so the figure that matters includes Spark's
start-up (about 6 s on this machine), the planning and the alias swap. The pipeline therefore
runs as a subprocess (``sparkindex reindex -c ... --new --json``) timed by its wall clock, and
the naive loop (bench/naive.py) indexes the same data in the same run, so the ratio compares
like with like on whatever load the machine has at that moment.

    BENCH=large BENCH_LARGE_ROWS=500000 .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.naive import naive_loop
from sparkindex.demo.large import generate_large_postgres, generate_large_sqlite, write_large_pipeline
from sparkindex.demo.shop import generate_shop, write_demo_pipeline

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "sparkindex"
PG_SERVER = "postgresql+psycopg://sparkindex@127.0.0.1:55432/sparkindex"
PG_DATABASE = "bench_large"


def default_rows() -> int:
    return int(os.environ.get("BENCH_LARGE_ROWS", "500000"))


def partition_size(rows: int) -> int:
    """About 32 partitions: enough for 2 cores to stay busy and for a resume to skip finished work."""
    return max(1000, rows // 32)


def cli_command(pipeline: Path, verb: str, *extra: str) -> list[str]:
    exe = str(CLI) if CLI.exists() else shutil.which("sparkindex") or "sparkindex"
    return [exe, verb, "-c", str(pipeline), "--json", *extra]


def last_json(stdout: str) -> dict[str, Any]:
    """The CLI's contract: one JSON object on the last line (anything before it is chatter)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            parsed: dict[str, Any] = orjson.loads(line)
            return parsed
    raise RuntimeError(f"no JSON line in the CLI's output: {stdout[-2000:]!r}")


@dataclass(frozen=True)
class CliRun:
    summary: dict[str, Any]
    seconds: float  # wall clock of the whole subprocess: interpreter, Spark start-up, job, exit
    returncode: int


def run_cli(pipeline: Path, verb: str = "reindex", *extra: str, timeout: float = 3600) -> CliRun:
    t0 = time.perf_counter()
    proc = subprocess.run(
        cli_command(pipeline, verb, *extra),
        cwd=pipeline.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"sparkindex {verb} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return CliRun(last_json(proc.stdout), wall, proc.returncode)


def spawn_reindex(pipeline: Path, capture: bool = False) -> subprocess.Popen[str]:
    """``reindex --new`` in its own session, so killing it never touches the benchmark's own group.

    Its tree (driver, Spark JVM, Python workers) is found by parent pid: see bench/memory.py.
    """
    return subprocess.Popen(
        cli_command(pipeline, "reindex", "--new"),
        cwd=pipeline.parent,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def pg_database(name: str = PG_DATABASE) -> str:
    """(Re)create a dedicated database on the test server; return its URL. Dropped by `drop_pg`."""
    import psycopg

    with psycopg.connect(PG_SERVER.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return PG_SERVER.rsplit("/", 1)[0] + f"/{name}"


def drop_pg(name: str = PG_DATABASE) -> None:
    import psycopg

    with psycopg.connect(PG_SERVER.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def large_dataset(source: str, rows: int, work: Path, **pipeline_opts: Any) -> Iterator[Path]:
    """Generate the large dataset for *source* ("sqlite" or "postgres") in *work*; yield the pipeline.

    PostgreSQL gets its own database (source and coordination, the latter with a prefix), dropped
    on exit so nothing is left on the shared test server.
    """
    work.mkdir(parents=True, exist_ok=True)
    opts: dict[str, Any] = {"partition_size": partition_size(rows), **pipeline_opts}
    if source == "sqlite":
        generate_large_sqlite(work / "large.db", rows)
        yield write_large_pipeline(work, **opts)
        return
    if source != "postgres":
        raise ValueError(f"unknown source {source!r}")
    url = pg_database()
    try:
        generate_large_postgres(url, rows)
        yield write_large_pipeline(work, source_url=url, coordination_url=url, coordination_prefix="bench_", **opts)
    finally:
        drop_pg()


def compare(pipeline: Path, work: Path, rows: int) -> dict[str, Any]:
    """The naive loop, the pipeline end to end, then the naive loop again, on the same data; the
    common figures. The ratio is against the faster of the two naive runs: the machine is shared,
    and a baseline that happened to run in a slow minute would flatter the pipeline."""
    before = naive_loop(pipeline, work / "naive-index")
    shutil.rmtree(work / "naive-index", ignore_errors=True)
    run = run_cli(pipeline, "reindex", "--new")
    indexed = int(run.summary.get("indexed", -1))
    if run.summary.get("status") != "COMPLETED" or indexed != rows:
        raise RuntimeError(f"the pipeline did not index {rows} documents: {run.summary}")
    after = naive_loop(pipeline, work / "naive-index")
    shutil.rmtree(work / "naive-index", ignore_errors=True)
    naive = min(before, after, key=lambda r: r.seconds)
    rate = rows / run.seconds
    return {
        "rows": rows,
        "docs_per_s": round(rate),
        "naive_docs_per_s": round(naive.docs_per_s),
        "ratio": round(rate / naive.docs_per_s, 3),
        "seconds": round(run.seconds, 2),
        "job_seconds": run.summary.get("seconds"),  # the job's own clock: without interpreter/JVM start
        "naive_seconds": round(naive.seconds, 2),
        "naive_runs_s": [round(before.seconds, 2), round(after.seconds, 2)],  # before and after the pipeline
        "naive_cpu_cores": round(naive.cpu_cores, 2),
        "avg_doc_bytes": round(naive.avg_doc_bytes),
        "cores": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews both sides
    }


def bench_large(source: str, rows: int | None = None) -> dict[str, Any]:
    rows = default_rows() if rows is None else rows
    work = Path(tempfile.mkdtemp(prefix=f"sparkindex-bench-large-{source}-"))
    try:
        t0 = time.perf_counter()
        with large_dataset(source, rows, work) as pipeline:
            generated = time.perf_counter() - t0
            figures = compare(pipeline, work, rows)
        return {"bench": "reindex_tantivy_large", "source": source, **figures, "generate_s": round(generated, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_shop(rows: int) -> dict[str, Any]:
    """The shop's small documents, end to end like the large ones (the `reindex_tantivy` line)."""
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-shop-"))
    try:
        generate_shop(work / "shop.db", rows)
        pipeline = write_demo_pipeline(work, partition_size=max(5000, rows // 32))
        return {"bench": "reindex_tantivy", "source": "sqlite", **compare(pipeline, work, rows)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main_lines(sources: tuple[str, ...] = ("sqlite", "postgres"), rows: int | None = None) -> Iterator[str]:
    for source in sources:
        try:
            yield orjson.dumps(bench_large(source, rows)).decode()
        except Exception as exc:  # noqa: BLE001 - one failing line must not hide the others
            yield orjson.dumps({"bench": "reindex_tantivy_large", "source": source, "error": str(exc)[-800:]}).decode()


if __name__ == "__main__":
    for line in main_lines(tuple(sys.argv[1:]) or ("sqlite", "postgres")):
        print(line, flush=True)
