"""Peak memory per Python worker, at a small and at a large row count (the target: flat, <= 1.3x).

Why: a worker that accumulates per-partition state (ids, hashes, a whole partition's documents)
grows with the data and dies on the first real table; one that streams pages stays flat. So the
pipeline runs twice end to end (100k and 1M rows by default) while a sampler watches every
process below the reindex (by parent pid): the Spark Python workers (``pyspark.daemon`` /
``pyspark.worker`` in their command line) and the driver. ``VmHWM`` in ``/proc/PID/status`` is the
kernel's own high-water mark of a process's resident set, so sampling every 0.2 s only has to see
each process once before it exits, not at its peak.

    BENCH=memory BENCH_MEMORY_SMALL=100000 BENCH_MEMORY_LARGE=1000000 .venv/bin/python -m bench.run
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.large import large_dataset, last_json, spawn_reindex

# PySpark's own daemon/worker, or a daemon module set by ``spark.python.daemon.module``
# (sparkindex preloads itself in ``sparkindex.spark.daemon``).
WORKER_MARKS = ("pyspark.daemon", "pyspark.worker", "pyspark/daemon.py", "pyspark/worker.py", "spark.daemon")


def descendants(root: int, marker: str | None = None) -> list[int]:
    """*root* and every live process below it, by parent pid, plus those whose command line holds
    *marker* (this run's work directory).

    Not by process group: PySpark's daemon calls ``setpgid(0, 0)``, so the Python workers it forks
    live in a group of their own, outside the reindex's session group. The marker catches the
    Tantivy writer service, which detaches (its own session) and outlives the task that started it.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [root]
    if marker:
        todo.extend(p for ps in children.values() for p in ps if p != os.getpid() and marker in cmdline(p))
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def vm_hwm_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def kill_tree(root: int, marker: str | None = None) -> None:
    """SIGKILL *root*, everything below it and their process groups (the Spark workers' included).

    The tree is read before the first signal: once the driver dies its children are re-parented and
    can no longer be found from it. Repeated until nothing of it is left alive.
    """
    pids = set(descendants(root, marker))
    for _ in range(10):
        groups = set()
        for pid in list(pids):
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                pids.discard(pid)
        for pgid in groups - {os.getpgid(0)}:  # never our own group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        pids = {p for p in pids if not _zombie(p)}
        if not pids:
            return


def _zombie(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


@dataclass
class PeakSampler:
    """Samples VmHWM of the reindex's process tree until stopped; keeps each process's maximum."""

    driver_pid: int
    marker: str | None = None
    every_s: float = 0.2
    workers: dict[int, int] = field(default_factory=dict)  # pid -> peak kB
    driver_kb: int = 0
    jvm_kb: int = 0
    service_kb: int = 0  # the Tantivy writer service (one per index version, fed by the tasks)
    others_kb: int = 0  # any other Python process of the tree
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PeakSampler:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def sample(self) -> None:
        for pid in descendants(self.driver_pid, self.marker):
            kb = vm_hwm_kb(pid)
            if pid == self.driver_pid:
                self.driver_kb = max(self.driver_kb, kb)
                continue
            line = cmdline(pid)
            exe = line.split(" ", 1)[0]
            if "java" in exe:  # first: the JVM's command line carries the daemon module's name too
                self.jvm_kb = max(self.jvm_kb, kb)
            elif "python" not in exe:
                continue  # shells and launchers
            elif "tantivy.service" in line:
                self.service_kb = max(self.service_kb, kb)
            elif any(mark in line for mark in WORKER_MARKS):
                self.workers[pid] = max(self.workers.get(pid, 0), kb)
            else:
                self.others_kb = max(self.others_kb, kb)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self.sample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def measure(pipeline: Path, rows: int, timeout: float = 7200) -> dict[str, Any]:
    """Run ``reindex --new`` under the sampler; the peaks in MB and the run's summary."""
    proc = spawn_reindex(pipeline, capture=True)
    marker = str(pipeline.parent)
    sampler = PeakSampler(proc.pid, marker).start()
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        sampler.stop()
        kill_tree(proc.pid, marker)  # a leftover daemon or service must not outlive the measurement
    summary = last_json(stdout)
    if summary.get("indexed") != rows:
        raise RuntimeError(f"reindex did not index {rows} documents: {summary}")
    peak = max(sampler.workers.values(), default=0)
    return {
        "worker_peak_rss_mb": round(peak / 1024, 1),
        "workers_seen": len(sampler.workers),
        "driver_peak_rss_mb": round(sampler.driver_kb / 1024, 1),
        "jvm_peak_rss_mb": round(sampler.jvm_kb / 1024, 1),
        "writer_service_peak_rss_mb": round(sampler.service_kb / 1024, 1),
        "other_python_peak_rss_mb": round(sampler.others_kb / 1024, 1),
    }


def bench_memory(small: int | None = None, large: int | None = None, source: str = "sqlite") -> dict[str, Any]:
    small = small or int(os.environ.get("BENCH_MEMORY_SMALL", "100000"))
    large = large or int(os.environ.get("BENCH_MEMORY_LARGE", "1000000"))
    # A fixed partition size, as a user's config has: more rows make more partitions, and a worker
    # that streams pages stays flat however many it processes (a per-partition buffer would not).
    part = int(os.environ.get("BENCH_MEMORY_PARTITION", "10000"))
    result: dict[str, Any] = {
        "bench": "memory",
        "source": source,
        "rows_small": small,
        "rows_large": large,
        "partition_size": part,
    }
    for label, rows in (("small", small), ("large", large)):
        work = Path(tempfile.mkdtemp(prefix=f"sparkindex-bench-mem-{label}-"))
        try:
            with large_dataset(source, rows, work, partition_size=part) as pipeline:
                m = measure(pipeline, rows)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        result[f"worker_peak_rss_mb_{label}"] = m["worker_peak_rss_mb"]
        result[f"driver_peak_rss_mb_{label}"] = m["driver_peak_rss_mb"]
        result[f"jvm_peak_rss_mb_{label}"] = m["jvm_peak_rss_mb"]
        result[f"writer_service_peak_rss_mb_{label}"] = m["writer_service_peak_rss_mb"]
        result[f"other_python_peak_rss_mb_{label}"] = m["other_python_peak_rss_mb"]
        result[f"workers_seen_{label}"] = m["workers_seen"]
    for key, name in (("worker", "ratio"), ("driver", "driver_ratio"), ("writer_service", "writer_service_ratio")):
        small_mb, large_mb = result[f"{key}_peak_rss_mb_small"], result[f"{key}_peak_rss_mb_large"]
        result[name] = round(large_mb / small_mb, 3) if small_mb else None
    return result


if __name__ == "__main__":
    import orjson

    print(orjson.dumps(bench_memory()).decode(), flush=True)
