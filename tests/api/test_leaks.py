"""A process that calls ``sparkindex.api.reindex`` again and again (a scheduler's worker, a
notebook) keeps what it holds flat: every run closes the store, the source and the target it
opened, and stops the threads it started.

One process, one Spark session, a PostgreSQL coordination store in a database of the test's own
(so its connections are counted on the server, by database name, and no other test's are), a
SQLite source and an embedded Tantivy target. After a first call has warmed every cache that is
meant to stay (imports, Spark's Python workers and their cached store, the JVM's sockets), the
file descriptors, threads and store connections of call 100 are those of call 1.

Store connections are told apart by the process holding them: the calling process must hold none
after a call, and each Spark Python worker holds only its one cached store (Spark may start
another worker for a task while an idle one lives on; each is bounded, none grows).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex import api
from sparkindex.config.urls import normalize_url
from tests.e2e.shop import drop_database, fresh_database, wait_for
from tests.support.socket_owners import command_line, port_owners

CALLS = 100
ROWS = 20


@dataclass(frozen=True)
class Held:
    """What the process holds after one call (and, for store connections, what the server sees:
    those of this process, and the most any one Spark Python worker holds)."""

    fds: int
    threads: int
    tasks: int
    store_connections: int
    worker_store_connections: int

    def at_most(self, other: Held) -> bool:
        """Nothing more held than *other* (a worker's connections are bounded on their own)."""
        bounded = [f.name for f in fields(self) if f.name != "worker_store_connections"]
        return all(getattr(self, name) <= getattr(other, name) for name in bounded)


class StoreConnections:
    """Counts the store's connections on the server by the local process holding each: its
    database is the test's own, so every connection to it is one that sparkindex opened (this
    counter's own is to another database)."""

    def __init__(self, server_url: str, database: str) -> None:
        self.database = database
        self.engine = sa.create_engine(normalize_url(server_url), poolclass=sa.pool.StaticPool)
        self.count()  # its connection is made now: it is not one of the descriptors the calls open

    def by_process(self) -> dict[int | None, int]:
        """pid -> connections it holds (None: a connection no process of this test holds)."""
        with self.engine.connect() as conn:
            ports = conn.execute(
                sa.text("SELECT client_port FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"),
                {"db": self.database},
            ).scalars()
            owners = port_owners(os.getpid())
            counted: dict[int | None, int] = {}
            for port in ports:
                owner = owners.get(port)
                counted[owner] = counted.get(owner, 0) + 1
            return counted

    def count(self) -> int:
        """This process's (a connection whose holder is gone counts here: it is still ending)."""
        counted = self.by_process()
        return counted.get(os.getpid(), 0) + counted.get(None, 0)

    def per_worker(self) -> int:
        """The most connections any one Spark Python worker of this process holds."""
        counted = self.by_process()
        workers = [n for pid, n in counted.items() if pid is not None and pid != os.getpid()]
        for pid in counted:
            if pid is not None and pid != os.getpid():
                assert PYTHON_WORKER in command_line(pid), f"a store connection held by {command_line(pid)!r}"
        return max(workers, default=0)

    def close(self) -> None:
        self.engine.dispose()


@pytest.fixture
def store_database(services: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(URL, name) of an empty PostgreSQL database for the coordination store, dropped afterwards."""
    name = f"leaks_{uuid.uuid4().hex[:10]}"
    url = fresh_database(services["postgres"], name)
    yield url, name
    drop_database(services["postgres"], name)


def tiny_pipeline(folder: Path, store_url: str) -> Path:
    """A one-table SQLite source of ROWS rows into Tantivy: one partition, one Spark task a call."""
    db = folder / "items.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item {i}") for i in range(ROWS)])
    conn.commit()
    conn.close()
    config = folder / "pipeline.yaml"
    config.write_text(
        f"source:\n  url: sqlite:///{db}\n"
        f"coordination:\n  url: {store_url}\n"
        "target:\n  url: tantivy://index\n"
        "spark:\n  master: local[2,4]\n"
        "indexes:\n  - alias: items\n    table: items\n    partition_size: 1000\n",
        encoding="utf-8",
    )
    return config


def held(connections: StoreConnections) -> Held:
    return Held(
        fds=len(os.listdir("/proc/self/fd")),
        threads=len(threading.enumerate()),
        tasks=len(os.listdir("/proc/self/task")),
        store_connections=connections.count(),
        worker_store_connections=connections.per_worker(),
    )


#: OS threads (``/proc/self/task``) a call may leave for a moment: Tantivy's meta-file watcher, a
#: native thread per open index directory, notices that its index was closed on its next poll,
#: up to 500 ms later, so a call that follows at once can find the last one or two still there.
#: One thread left behind per call would pass this within three calls.
PASSING_THREADS = 2
#: a store connection closed at the end of a call whose server process is still exiting when
#: counted (PostgreSQL ends a backend just after its client's goodbye, not before the close
#: returns); one connection left open per call would pass this within two calls
PASSING_CONNECTIONS = 1
#: a Spark Python worker's cached store: the autocommit connection of its task thread's direct
#: statements and one pooled connection for transactions
WORKER_CONNECTIONS = 2
#: how a Spark Python worker of this suite's sessions shows in ``ps``
PYTHON_WORKER = "sparkindex.spark.daemon"


@pytest.mark.slow
@pytest.mark.postgres
def test_a_hundred_reindex_calls_hold_no_more_than_the_first(
    tmp_path: Path, services: dict[str, str], store_database: tuple[str, str], spark: Any
) -> None:
    store_url, database = store_database
    config = tiny_pipeline(tmp_path, store_url)
    connections = StoreConnections(services["postgres"], database)
    gc.disable()  # what a call opened must be closed by the call, not when the collector finds it
    try:
        after: list[Held] = []
        for n in range(CALLS):
            result = api.reindex(config, spark=spark)
            assert (result.outcome, result.indexed) == (api.Outcome.DONE, ROWS), (n, result)
            if after:
                # the connections a call closed have backends that end just after it, later on a
                # loaded machine: polled until they have (a connection kept open never does)
                allowed = after[0].store_connections + PASSING_CONNECTIONS
                with contextlib.suppress(AssertionError):
                    wait_for(lambda cap=allowed: connections.count() <= cap, 5.0, "closed store connections to end")
            after.append(held(connections))
            first, now = after[0], after[-1]
            grown = (
                now.fds > first.fds
                or now.threads > first.threads
                or now.tasks > first.tasks + PASSING_THREADS
                or now.store_connections > first.store_connections + PASSING_CONNECTIONS
                or now.worker_store_connections > WORKER_CONNECTIONS
            )
            assert not grown, f"after call 1: {first}; after call {n + 1}: {now}"
        # and nothing is left for good: what was still passing is gone once it had its moment
        wait_for(lambda: held(connections).at_most(after[0]), 5.0, f"no more held than after call 1 ({after[0]})")
    finally:
        gc.enable()
        connections.close()
