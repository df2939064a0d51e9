"""The pipeline's own cost: ``sparkindex reindex`` into a null bulk endpoint, against PostgreSQL's ceiling.

Why: into Tantivy (bench/large.py) the figure is bounded by Tantivy's indexing, and the only
OpenSearch here (``osmem-server``, a test double) is slower still, so neither says what the
pipeline itself costs. Here the target is ``opensearch://`` pointed at bench/null_endpoint.py,
which acknowledges every bulk item and stores nothing; what remains is reading, building,
encoding, sending and bookkeeping. Two baselines are measured on the same data in the same run,
because this machine is shared and noisy:

- the ceiling: ``COPY (document query) TO STDOUT`` through psycopg, the very statement the
  pipeline's in-database builder (documents/in_database.py) pages through, over the whole table.
  That is how fast PostgreSQL alone hands over finished documents (one backend, one client).
  It runs before and after the reindex, and the figure is their mean.
- the peer: PGSync 7.3 moved such documents at about 2,400 docs/s into a null endpoint on this
  machine; a constant, since PGSync is not installed here.

The reindex runs end to end (a subprocess, Spark start-up included) on ~2.4 KB nested documents
(src/sparkindex/demo/large.py) while a sampler reads each process's peak RSS once a second
(``VmHWM`` is the kernel's high-water mark, so a coarse sampler misses no peak of a process it
sees; one sample a second costs the pipeline next to nothing). A second, smaller run with the
same partition size shows whether a Python worker's peak grows with the row count.

    BENCH=null .venv/bin/python -m bench.run
    BENCH_QUICK=1 BENCH=null .venv/bin/python -m bench.run
    BENCH_NULL_ROWS=1000000 BENCH_NULL_MEMORY_SMALL=250000 .venv/bin/python -m bench.null

``BENCH_NULL_ROWS`` (default 1,000,000); ``BENCH_NULL_MEMORY_SMALL`` (default a quarter of it; 0
skips the second run). Not a tenth: at 100,000 rows the driver's head start had run nearly every
partition before Spark's workers started (the job took 8.7 s), so the "small" peak was that of an
idle worker (113-115 MB, against 201-211 MB for workers that ran partitions at 250,000 rows and
219-232 MB at 1,000,000, traced once a second): a comparison of start-up, not of row counts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.large import drop_pg, last_json, partition_size, pg_database, spawn_reindex
from bench.memory import WORKER_MARKS, PeakSampler, cmdline, descendants, kill_tree
from bench.null_endpoint import null_endpoint
from bench.pg import copy_ceiling
from sparkindex.config import load_pipeline
from sparkindex.demo.large import generate_large_postgres, write_large_pipeline
from sparkindex.documents import resolve_index
from sparkindex.documents.in_database import JsonAggregationBuilder
from sparkindex.resources import open_source_url

#: PGSync 7.3 into a null endpoint, 2 KB nested documents from PostgreSQL, measured once on this kind of machine.
PEER_PGSYNC_DOCS_PER_S = 2400
#: Its own database on the shared test server, so that another benchmark's database is never ours.
DATABASE = "bench_null"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def default_rows() -> int:
    return int(os.environ.get("BENCH_NULL_ROWS", "1000000"))


@contextmanager
def null_dataset(rows: int, work: Path, part: int) -> Iterator[Path]:
    """The large documents in PostgreSQL (source and coordination store); yields the pipeline."""
    work.mkdir(parents=True, exist_ok=True)
    url = pg_database(DATABASE)
    try:
        generate_large_postgres(url, rows)
        yield write_large_pipeline(
            work, source_url=url, coordination_url=url, coordination_prefix="bench_", partition_size=part
        )
    finally:
        drop_pg(DATABASE)


def point_at(pipeline: Path, target_url: str) -> None:
    """Rewrite the pipeline's target (the large pipeline writes into Tantivy) to *target_url*."""
    text = pipeline.read_text(encoding="utf-8")
    replaced = text.replace("url: tantivy://index", f"url: {target_url}")
    if replaced == text:
        raise RuntimeError(f"no Tantivy target to replace in {pipeline}")
    pipeline.write_text(replaced, encoding="utf-8")


def source_ceiling(pipeline: Path) -> float:
    """Documents/s of COPY over the in-database builder's own statement for the whole table."""
    loaded = load_pipeline(pipeline)
    with open_source_url(loaded.source_url()) as source:
        plan = resolve_index(source, loaded.indexes[0], "indexes[0]")
        return copy_ceiling(loaded.source_url(), JsonAggregationBuilder(source, plan))


def reindex_into_null(pipeline: Path, rows: int, timeout: float = 7200) -> dict[str, Any]:
    """``reindex --new`` into a fresh null endpoint under the RSS sampler: wall clock, peaks, and
    what the endpoint saw (its CPU, the items it acknowledged, any path it did not know)."""
    with null_endpoint() as endpoint:
        point_at(pipeline, endpoint.url)
        marker = str(pipeline.parent)
        t0, machine0 = time.perf_counter(), _machine_ticks()
        proc = spawn_reindex(pipeline, capture=True)
        sampler = CpuSampler(proc.pid, marker, every_s=1.0)
        sampler.start()
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        finally:
            sampler.stop()
            kill_tree(proc.pid, marker)  # nothing of it may outlive the measurement
        wall = time.perf_counter() - t0
        busy, total = (after - before for after, before in zip(_machine_ticks(), machine0, strict=True))
        seen = endpoint.stats()
    summary = last_json(stdout)
    if summary.get("status") != "COMPLETED" or summary.get("indexed") != rows:
        raise RuntimeError(f"reindex into the null endpoint did not index {rows} documents: {summary}")
    if seen["unknown"]:
        raise RuntimeError(f"the target called paths the null endpoint does not answer: {seen['unknown']}")
    return {
        "seconds": wall,
        "job_seconds": summary.get("seconds"),
        "worker_peak_rss_mb": round(max(sampler.workers.values(), default=0) / 1024, 1),
        "workers_seen": len(sampler.workers),
        "driver_peak_rss_mb": round(sampler.driver_kb / 1024, 1),
        "jvm_peak_rss_mb": round(sampler.jvm_kb / 1024, 1),
        "endpoint": seen,
        "cpu_s": {**sampler.cpu_by_kind(), "endpoint": round(seen["cpu_s"], 1)},
        "machine_busy_share": busy / total if total else None,
    }


@dataclass
class CpuSampler(PeakSampler):
    """The RSS sampler, also noting the CPU seconds of every process it sees, by kind, and of the
    PostgreSQL backends serving this benchmark's database (found by their title, which names it).

    A process's figure is its last sample, so up to a second of each one's end is missed: the
    figures are lower bounds, good for telling where the time went, not for adding to the wall.
    """

    database: str = DATABASE
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (kind, CPU s)

    def sample(self) -> None:
        super().sample()
        for pid in descendants(self.driver_pid, self.marker):
            line = cmdline(pid)
            exe = line.split(" ", 1)[0]
            if pid == self.driver_pid:
                kind = "driver"
            elif "java" in exe:
                kind = "jvm"
            elif "python" in exe and any(mark in line for mark in WORKER_MARKS):
                kind = "python_workers"
            else:
                kind = "other"
            self._note(pid, kind)
        title = f" {self.database} "
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                line = cmdline(int(entry))
                if line.startswith("postgres: ") and title in line:
                    self._note(int(entry), "postgres")

    def _note(self, pid: int, kind: str) -> None:
        seconds = _cpu_s(pid)
        if seconds is not None:
            self.cpu[pid] = (kind, max(seconds, self.cpu.get(pid, (kind, 0.0))[1]))

    def cpu_by_kind(self) -> dict[str, float]:
        out = dict.fromkeys(("python_workers", "jvm", "driver", "postgres", "other"), 0.0)
        for kind, seconds in self.cpu.values():
            out[kind] += seconds
        return {k: round(v, 1) for k, v in out.items()}


def _cpu_s(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot, from ``/proc/stat``: whoever used it,
    PostgreSQL and the other engineers' work included."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def bench_null(rows: int | None = None, small: int | None = None) -> dict[str, Any]:
    rows = default_rows() if rows is None else rows
    small = int(os.environ.get("BENCH_NULL_MEMORY_SMALL", str(rows // 4))) if small is None else small
    part = partition_size(rows)  # the same for the small run: more rows make more partitions, not bigger ones
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-null-"))
    try:
        t0 = time.perf_counter()
        with null_dataset(rows, work / "large", part) as pipeline:
            generated = time.perf_counter() - t0
            # The ceiling before and after the reindex: the machine's load drifts (other
            # engineers' work), and the mean of both brackets the reindex's own window.
            ceilings = [source_ceiling(pipeline)]
            run = reindex_into_null(pipeline, rows)
            ceilings.append(source_ceiling(pipeline))
        peaks = {str(rows): run["worker_peak_rss_mb"]}
        if small:
            with null_dataset(small, work / "small", part) as pipeline:
                peaks[str(small)] = reindex_into_null(pipeline, small)["worker_peak_rss_mb"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = rows / run["seconds"]
    ceiling = sum(ceilings) / len(ceilings)
    seen = run["endpoint"]
    return {
        "bench": "reindex_null",
        "source": "postgres",
        "rows": rows,
        "docs_per_s": round(rate),
        "source_ceiling_docs_per_s": round(ceiling),
        "source_ceiling_before_after": [round(c) for c in ceilings],
        "ratio": round(rate / ceiling, 3),
        "peer_pgsync_docs_per_s": PEER_PGSYNC_DOCS_PER_S,
        "vs_peer": round(rate / PEER_PGSYNC_DOCS_PER_S, 2),
        "worker_peak_rss_mb": peaks,
        "worker_rss_ratio": round(peaks[str(rows)] / peaks[str(small)], 3) if small and peaks[str(small)] else None,
        "workers_seen": run["workers_seen"],
        "driver_peak_rss_mb": run["driver_peak_rss_mb"],
        "jvm_peak_rss_mb": run["jvm_peak_rss_mb"],
        "seconds": round(run["seconds"], 2),
        "job_seconds": run["job_seconds"],  # the job's own clock: without interpreter and JVM start
        "partition_size": part,
        "avg_bulk_item_bytes": round(seen["bulk_bytes"] / max(1, seen["bulk_items"])),
        "endpoint_bulk_requests": seen["bulk_requests"],
        # Where the CPU went (lower bounds, see CpuSampler; "endpoint": the null server's own), and
        # how busy the whole machine was (1.0: saturated, by this run or by anyone else's work).
        "cpu_s": run["cpu_s"],
        "machine_busy_share": round(run["machine_busy_share"], 3),
        "cores": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews every figure
        "generate_s": round(generated, 1),
    }


if __name__ == "__main__":
    print(orjson.dumps(bench_null()).decode(), flush=True)
