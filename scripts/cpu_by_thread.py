"""Where one command's CPU goes, by process kind and thread: run it, sample its process tree.

Why threads: on 2 cores a reindex's time is its CPU, and the question is whose. The Spark workers'
Python threads, Tantivy's indexing and merge threads, its doc-store compressor and the driver JVM
each show under their own names (``/proc/PID/task/TID/comm``), which a per-process figure lumps
together. Every process the command starts is followed through its parent pids; CPU a process
spent before its first sample is counted, CPU after its last sample (at most one interval) is
missed, so the sum falls a little short of the machine's total, printed beside it.

    python3 scripts/cpu_by_thread.py [--every 0.25] -- sparkindex reindex -c pipeline.yaml

Prints one JSON object: wall seconds, the machine's CPU-seconds and cores over the run, and
CPU-seconds per ``kind: thread``, largest first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time

HZ = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU-seconds the machine has spent busy since boot (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / HZ


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return None


def kind_of(cmdline: str) -> str:
    if "java" in cmdline.split(" ", 1)[0]:
        return "java"
    if "sparkindex.spark.daemon" in cmdline or "pyspark.daemon" in cmdline:
        return "spark worker"
    return "command"


def thread_name(kind: str, comm: str, pid: int, tid: int) -> str:
    """A thread's name without its number; a Python process's threads are all called after the
    interpreter, so its main thread is told from the others by its id."""
    name = re.sub(r"[-\s#]?\d+$", "", comm) or comm
    if kind == "java":
        return re.sub(r"[-\s]?\d+.*$", "", comm) or comm
    if name.startswith("python"):
        return "python main" if pid == tid else "python other"
    return name


def sample(tree: set[int], seen: dict[tuple[int, int], tuple[str, float]]) -> None:
    """Add the processes whose parent is in *tree*, then record every thread's CPU so far."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        stat = _read(f"/proc/{pid}/stat")
        if stat is None:
            continue
        if pid not in tree and int(stat[stat.rindex(")") + 2 :].split()[1]) in tree:
            tree.add(pid)
        if pid not in tree:
            continue
        kind = kind_of((_read(f"/proc/{pid}/cmdline") or "").replace("\0", " "))
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tids:
            text = _read(f"/proc/{pid}/task/{t}/stat")
            if text is None:
                continue
            comm = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            cpu = (int(fields[11]) + int(fields[12])) / HZ
            seen[(pid, int(t))] = (f"{kind}: {thread_name(kind, comm, pid, int(t))}", cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started, busy = time.monotonic(), machine_cpu()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    tree, seen = {proc.pid}, {}
    while proc.poll() is None:
        sample(tree, seen)
        time.sleep(args.every)  # the sampling interval, not a wait for anything
    wall, cpu = time.monotonic() - started, machine_cpu() - busy
    by: dict[str, float] = {}
    for name, seconds in seen.values():
        by[name] = by.get(name, 0.0) + seconds
    shown = {k: round(v, 2) for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    print(
        json.dumps(
            {
                "exit": proc.returncode,
                "wall_s": round(wall, 1),
                "machine_cpu_s": round(cpu, 1),
                "cores": round(cpu / wall, 2),
                "sampled_cpu_s": round(sum(by.values()), 1),
                "by": shown,
            }
        )
    )


if __name__ == "__main__":
    main()
