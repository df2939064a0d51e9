"""A real Spark standalone cluster on this machine: one master, N workers, from the pip package.

With *user*, the workers (and so their executors and Python workers) run as that unprivileged
user, in an environment of their own: they see the Spark installation (its jars), not the driver's
interpreter or its environment; their work folder must be one that user can write."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {timeout}s")


@dataclass
class StandaloneCluster:
    workdir: Path
    workers: int = 2
    master_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: the workers' user (None: this process's) and their SPARK_WORKER_DIR (default workdir/work)
    user: str | None = None
    worker_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, args: list[str], log: str, user: str | None = None) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_WORKER_DIR": str(self.worker_dir or self.workdir / "work"),
        }
        as_user: dict[str, object] = {}
        if user is not None:  # nothing of this process's environment: no venv on PATH, no PYSPARK_*
            env = {key: env[key] for key in ("SPARK_HOME", "SPARK_LOCAL_IP", "SPARK_WORKER_DIR")}
            env |= {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
            if "JAVA_HOME" in os.environ:
                env["JAVA_HOME"] = os.environ["JAVA_HOME"]
            as_user = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": [], "cwd": "/"}
        out = open(self.workdir / log, "wb")  # noqa: SIM115 - lives as long as the process
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,
            **as_user,  # type: ignore[arg-type]
        )

    def start(self) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs.append(
            self._spawn(
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    str(free_port()),
                ],
                "master.log",
            )
        )
        _wait_port(self.master_port, 120)
        for i in range(self.workers):
            self.procs.append(
                self._spawn(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        self.url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "2g",
                        "--webui-port",
                        str(free_port()),
                    ],
                    f"worker{i}.log",
                    self.user,
                )
            )
        return self

    def worker(self, i: int) -> subprocess.Popen[bytes]:
        return self.procs[1 + i]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
