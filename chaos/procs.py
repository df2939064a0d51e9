"""Finding the real processes a fault is aimed at, by reading /proc.

A chaos trial kills what a real deployment would lose: a driver JVM, an executor, one Python worker in
the middle of a task. Those processes are not ours (Spark starts them), so they are found by their
command lines under the process we did start. /proc is read directly: psutil is not a dependency and
everything needed here is two small files per process.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PROC = Path("/proc")

Role = Literal["driver-jvm", "executor", "worker", "master"]

# The main class on a Spark JVM's command line tells what it is.
SPARK_MAIN_CLASSES: dict[str, Role] = {
    "org.apache.spark.deploy.SparkSubmit": "driver-jvm",
    "org.apache.spark.executor.CoarseGrainedExecutorBackend": "executor",
    "org.apache.spark.deploy.worker.Worker": "worker",
    "org.apache.spark.deploy.master.Master": "master",
}


@dataclass(frozen=True)
class SparkJvm:
    pid: int
    role: Role


def pids() -> list[int]:
    """Every process id on the machine now."""
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) from /proc/<pid>/stat, or None if the process is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may itself hold spaces or ")": split after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def parent(pid: int) -> int | None:
    """The parent's pid, or None if the process is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie has exited; only its entry is left)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    """The process's argv, or [] if it is gone (or is a kernel thread or a zombie)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]] if raw else []


def _parents() -> dict[int, int]:
    table: dict[int, int] = {}
    for pid in pids():
        stat = _stat(pid)
        if stat is not None:
            table[pid] = stat[1]
    return table


def children(pid: int) -> list[int]:
    """All live descendants of pid (children, grandchildren, ...), nearest first; pid itself excluded."""
    by_parent: dict[int, list[int]] = {}
    for child, ppid in _parents().items():
        by_parent.setdefault(ppid, []).append(child)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        level = sorted(c for p in frontier for c in by_parent.get(p, []))
        found += level
        frontier = level
    return [p for p in found if alive(p)]


def find(pred: Callable[[list[str]], bool], under: int | None = None) -> list[int]:
    """Live processes whose argv satisfies pred: among the descendants of under, or machine-wide."""
    candidates = children(under) if under is not None else sorted(pids())
    me = os.getpid()
    return [pid for pid in candidates if pid != me and alive(pid) and (argv := cmdline(pid)) and pred(argv)]


def spark_role(argv: list[str]) -> Role | None:
    """What a java command line is in Spark's terms: the first argument naming a known main class."""
    if not argv or Path(argv[0]).name != "java":
        return None
    for arg in argv[1:]:
        if arg in SPARK_MAIN_CLASSES:
            return SPARK_MAIN_CLASSES[arg]
    return None


def spark_jvms(under: int | None = None) -> list[SparkJvm]:
    """Spark's JVMs (driver, executors, standalone workers and master), each with its role.

    In local mode the executors live inside the driver JVM, so only "driver-jvm" is found there.
    """
    return [
        SparkJvm(pid, role)
        for pid in find(lambda argv: spark_role(argv) is not None, under)
        if (role := spark_role(cmdline(pid))) is not None
    ]


def python_module(argv: list[str]) -> str | None:
    """The module a ``python [options] -m <module> ...`` command line runs, else None.

    Only the interpreter's own options are looked at: a "-m" among a script's arguments is not it.
    """
    if not argv or not Path(argv[0]).name.startswith("python"):
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg.startswith("-m"):
            return arg[2:]
        if arg in ("-W", "-X"):
            next(args, None)  # the option's value
        elif arg == "-c" or arg == "-" or not arg.startswith("-"):
            return None  # a command, stdin or a script: no module
    return None


def python_workers(under: int | None = None) -> list[int]:
    """The Python processes that run PySpark tasks (the ones to kill to fail one task).

    Spark starts ``python -m pyspark.daemon`` once per executor; the daemon forks one child per task
    slot, and the fork keeps the daemon's command line. The forked children run the tasks (killing the
    daemon instead takes every worker of the executor down with it), so these are what is returned:
    processes with the daemon's command line whose parent is a daemon too. (PySpark 4 passes the worker
    module to the daemon: ``python -m pyspark.daemon pyspark.worker``.) A worker started on its own
    (``spark.python.use.daemon=false``: ``python -m pyspark.worker``) is returned as well. Idle workers
    stay forked after a job (worker reuse), so there is usually one to find between tasks too.
    """
    daemons = set(find(lambda argv: python_module(argv) == "pyspark.daemon", under))
    forked = [pid for pid in daemons if parent(pid) in daemons]
    standalone = find(lambda argv: python_module(argv) == "pyspark.worker", under)
    return sorted(set(forked) | set(standalone))


def signal_pid(pid: int, sig: int) -> bool:
    """Send sig to pid; False if the process was already gone (or is a zombie), True if it was sent."""
    if not alive(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until pid has exited (gone or zombie); False if it is still alive after timeout seconds."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Signal pid and every descendant (descendants first, so none is re-parented and missed).

    Returns the pids that were signalled.
    """
    return [p for p in [*reversed(children(pid)), pid] if signal_pid(p, sig)]
