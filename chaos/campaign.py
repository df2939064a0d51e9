"""The servers a campaign shares between its trials, started when a trial first needs them.

PostgreSQL (the store always, the source in PostgreSQL trials) and MariaDB are private
instances under the campaign's directory, never the test suite's servers: the campaign restarts
them. osmem-server is an in-memory OpenSearch-compatible TEST DOUBLE, one clone per trial. The
Spark standalone cluster (a master and two workers) is there for the trials that kill executors.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

from chaos.servers import MariaDbServer, PgServer

#: what became of a planned fault: it landed, it found no victim in time, or its tool broke
OUTCOMES = ("injected", "missed", "errored")

#: the cluster gives each application this many cores, and has a core for each application a
#: trial runs at once (a sync, a rebuild, a driver frozen by SIGSTOP that still holds its executors,
#: the driver that took over from it): a standalone master gives an application that asks later
#: nothing while others hold every core, and its jobs wait for ever (trial 1 of seed 3 did: the
#: sync held both cores of two, and the rebuild's catch-up never ran)
CORES_PER_APP = 1
WORKERS = 4  # of one core each


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fault_outcome(record: dict[str, Any]) -> str:
    """One of :data:`OUTCOMES` for a trial's fault record (:meth:`chaos.trial.TrialRun._fire`)."""
    if record.get("error"):
        return "errored"
    return "injected" if record.get("injected") else "missed"


def tally_faults(results: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per fault kind, how many were injected, missed and errored over the trials' results. Kept
    apart so the summary cannot pass a broken tool, or a fault without a victim, off as one that
    landed: "every kind injected at least 3 times" is read from the ``injected`` column alone."""
    by_kind: dict[str, dict[str, int]] = {}
    for result in results:
        for record in result["faults"]:
            counts = by_kind.setdefault(record["kind"], dict.fromkeys(OUTCOMES, 0))
            counts[fault_outcome(record)] += 1
    return dict(sorted(by_kind.items()))


class Campaign:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        # the servers' and the cluster's scratch from an earlier campaign in this workdir: a data
        # directory made for another port (its config and pid file) would not start here
        for scratch in ("pg", "mariadb", "cluster"):
            shutil.rmtree(workdir / scratch, ignore_errors=True)
        self._pg: PgServer | None = None
        self._maria: MariaDbServer | None = None
        self._osmem: Any = None
        self._cluster: Any = None

    def postgres(self) -> PgServer:
        if self._pg is None:
            self._pg = PgServer(self.workdir / "pg", _free_port())
            self._pg.start()
        return self._pg

    def mariadb(self) -> MariaDbServer:
        if self._maria is None:
            self._maria = MariaDbServer(self.workdir / "mariadb", _free_port())
            self._maria.start()
        return self._maria

    def osmem_clone(self) -> Any:
        from tests.support.osmem import OsmemCluster, start_osmem

        if self._osmem is None:
            self._osmem = start_osmem()
        clone = self._osmem.request("POST", "/_osmem/clones")
        return OsmemCluster(str(clone["url"]), str(clone["id"]), self._osmem)

    def drop_osmem_clone(self, clone: Any) -> None:
        with contextlib.suppress(Exception):  # osmem gone already: nothing to drop
            self._osmem.request("DELETE", f"/_osmem/clones/{clone.clone_id}")

    def spark_master(self, kind: str) -> tuple[str, dict[str, str]]:
        """The master URL and Spark settings for a trial of *kind* ("local" or "cluster")."""
        if kind == "local":
            return "local[2,4]", {}
        if self._cluster is None:
            from tests.cluster.standalone import StandaloneCluster

            self._cluster = StandaloneCluster(self.workdir / "cluster", workers=WORKERS).start()
        conf = {
            "spark.cores.max": str(CORES_PER_APP),
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.task.maxFailures": "4",
        }
        return self._cluster.url, conf

    def cluster_pids(self) -> list[int]:
        return [p.pid for p in self._cluster.procs] if self._cluster is not None else []

    def close(self) -> None:
        for closer in (
            getattr(self._cluster, "stop", None),
            getattr(self._osmem, "stop", None),
            getattr(self._maria, "stop", None),
            getattr(self._pg, "stop", None),
        ):
            if closer is not None:
                with contextlib.suppress(Exception):  # best-effort teardown: the trial's verdict is already taken
                    closer()

    def __enter__(self) -> Campaign:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
