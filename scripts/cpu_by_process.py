"""Where a run's CPU goes, by kind of process: the suite's wall time on 2 cores is its CPU.

Samples every process's user+system time from /proc once a second until SIGTERM/SIGINT (a
process that lives less than a second is missed), and writes the CPU seconds and process count
per kind to OUT as JSON (every 30 s and at the end). CPU a process had before the first sample is
not counted.

    python3 scripts/cpu_by_process.py /tmp/cpu.json & pid=$!
    make test; kill $pid; cat /tmp/cpu.json
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from types import FrameType

HZ = os.sysconf("SC_CLK_TCK")

#: (substring of the command line, kind), first match wins
KINDS = (
    ("org.apache.spark.deploy.master", "java: standalone master/worker"),
    ("org.apache.spark.deploy.worker", "java: standalone master/worker"),
    ("CoarseGrainedExecutorBackend", "java: standalone executor"),
    ("python_streaming_source_runner", "python: Spark streaming-source runner (sync)"),
    ("sparkindex.spark.daemon", "python: Spark worker (daemon and its forks)"),
    ("pyspark.daemon", "python: Spark worker (daemon and its forks)"),
    ("bin/sparkindex", "python: sparkindex command"),
    ("exec(eval(sys.stdin.readline()))", "python: pytest-xdist worker"),
    ("pytest", "python: pytest"),
    ("-m chaos", "python: chaos campaign"),
    ("osmem", "osmem-server (test double)"),
    ("postgres", "postgres"),
    ("mariadbd", "mariadb"),
    ("mysqld", "mariadb"),
)


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stat(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, CPU seconds, start time in ticks), or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / HZ, int(fields[19])


def kind_of(pid: int, parent: int) -> str:
    cmd = command_line(pid)
    if not cmd:
        return "other"
    if "java" in cmd.split(" ", 1)[0] and "org.apache.spark.deploy.SparkSubmit" in cmd:
        # a driver JVM: who started it says what it is
        return "java: driver of " + kind_of(parent, 0).split(": ", 1)[-1]
    for needle, kind in KINDS:
        if needle in cmd:
            return kind
    return "python: other" if "python" in cmd.split(" ", 1)[0] else "other"


def main(out: str) -> None:
    stop: list[bool] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.append(True)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    before: dict[tuple[int, int], float] = {}
    seen: dict[tuple[int, int], tuple[str, float]] = {}
    first, flushed = True, time.monotonic()
    while not stop:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            found = stat(int(name))
            if found is None:
                continue
            parent, cpu, started = found
            key = (int(name), started)
            if first:
                before[key] = cpu
            kind = seen[key][0] if key in seen else kind_of(int(name), parent)
            seen[key] = (kind, cpu - before.get(key, 0.0))
        first = False
        if time.monotonic() - flushed > 30:
            write(out, seen)
            flushed = time.monotonic()
        time.sleep(1)
    write(out, seen)


def write(out: str, seen: dict[tuple[int, int], tuple[str, float]]) -> None:
    cpu: dict[str, float] = {}
    count: dict[str, int] = {}
    for kind, seconds in seen.values():
        cpu[kind] = cpu.get(kind, 0.0) + seconds
        count[kind] = count.get(kind, 0) + 1
    ranked = sorted(cpu, key=lambda k: -cpu[k])
    with open(out, "w") as fh:
        json.dump(
            {
                "cpu_s_total": round(sum(cpu.values())),
                "by_kind": [{"kind": k, "cpu_s": round(cpu[k]), "processes": count[k]} for k in ranked if cpu[k] >= 1],
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main(sys.argv[1])
