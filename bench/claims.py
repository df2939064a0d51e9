"""Claims benchmark: the product's real partition path, on every store, durable where it can be.

Each of 16 claimers (processes by default, as Spark tasks are Python workers of their own; or
threads of one process, ``CLAIMS_MODE=threads``, which measures the GIL) takes its share of
the partition ids, as Spark tasks are handed theirs, and for each one runs exactly what the
partition worker runs: ``claim(pid)`` -> ``save_progress`` -> ``complete`` with the last batch
folded in. Every statement the store sends is counted.

PostgreSQL is measured with ``fsync=on`` and ``synchronous_commit=on`` (the production default;
the test server runs with both off): set with ALTER SYSTEM for the run, verified with SHOW from
the benchmark's own connections, and restored in a ``finally``. MariaDB likewise with
``innodb_flush_log_at_trx_commit=1``. SQLite runs as the store configures it (WAL,
``synchronous=NORMAL``: safe against a crash of the process, not of the machine).

``bound_by`` is derived from what was measured: the host's CPU use during the run, the client's
own CPU use, and the latency of one durable commit alone.

Run: ``python -m bench.claims`` (env: CLAIMS_PARTITIONS, CLAIMS_CLAIMERS, CLAIMS_MODE).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.coordination.records import PartitionSpec
from sparkindex.coordination.store import CoordinationStore
from sparkindex.resources import open_store_url

PG = "postgresql://sparkindex@127.0.0.1:55432/sparkindex"
MYSQL = "mysql://root@127.0.0.1:53306/sparkindex"


# -- durability switched on for the run, and back ---------------------------------------------------
def _show(url: str, names: list[str]) -> dict[str, str]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                return {n: str(conn.execute(sa.text(f"SHOW {n}")).scalar_one()) for n in names}
            rows = conn.execute(sa.text("SHOW GLOBAL VARIABLES")).all()
            return {k: str(v) for k, v in rows if k in names}
    finally:
        engine.dispose()


@contextmanager
def durable_postgres(url: str) -> Iterator[None]:
    """fsync and synchronous_commit on through ALTER SYSTEM; the previous state restored after.

    A setting that came from postgresql.auto.conf is set back to its value; one that came from
    postgresql.conf (the test server) is RESET, so postgresql.conf applies again.
    """
    names = ("fsync", "synchronous_commit")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        before = {
            r.name: (r.setting, r.sourcefile or "")
            for r in conn.execute(
                sa.text(
                    "SELECT name, setting, sourcefile FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')"
                )
            )
        }
    try:
        with engine.connect() as conn:
            for n in names:
                conn.execute(sa.text(f"ALTER SYSTEM SET {n} = on"))
            conn.execute(sa.text("SELECT pg_reload_conf()"))
        _wait_settings(url, dict.fromkeys(names, "on"))
        yield
    finally:
        with engine.connect() as conn:
            for n in names:
                setting, source = before[n]
                if source.endswith("postgresql.auto.conf"):
                    conn.execute(sa.text(f"ALTER SYSTEM SET {n} = '{setting}'"))
                else:
                    conn.execute(sa.text(f"ALTER SYSTEM RESET {n}"))
            conn.execute(sa.text("SELECT pg_reload_conf()"))
        engine.dispose()
        _wait_settings(url, {n: before[n][0] for n in names})


def _wait_settings(url: str, want: dict[str, str]) -> None:
    """pg_reload_conf() only signals the server: wait until new sessions see the settings."""
    deadline = time.monotonic() + 10
    while (got := _show(url, list(want))) != want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"PostgreSQL settings are {got}, expected {want}")
        time.sleep(0.05)


@contextmanager
def durable_mysql(url: str) -> Iterator[None]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        before = conn.execute(sa.text("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")).scalar_one()
        conn.execute(sa.text("SET GLOBAL innodb_flush_log_at_trx_commit = 1"))
    try:
        yield
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(f"SET GLOBAL innodb_flush_log_at_trx_commit = {int(before)}"))
        engine.dispose()


# -- the claimers -----------------------------------------------------------------------------------
def _count_statements(store: CoordinationStore) -> list[int]:
    count = [0]

    def seen(*_args: Any) -> None:
        count[0] += 1

    for engine in {store.engine, store.single}:  # transactions, and the one-statement writes
        sa.event.listen(engine, "before_cursor_execute", seen)
    for direct in store.partition_rows.direct_statements():  # PostgreSQL's hot path, on the driver's cursor
        run = direct.run

        def counted(params: Any, run: Any = run) -> Any:
            seen()
            return run(params)

        direct.run = counted  # type: ignore[method-assign]
    return count


def _work(store: CoordinationStore, ids: list[str], name: str, run_id: str) -> None:
    """Exactly the partition worker's calls for a partition of one acknowledged batch plus a last one."""
    for i, pid in enumerate(ids):
        rec = store.partition_rows.claim(pid, name, run_id, stale_after_s=600)
        if rec is None:
            raise AssertionError(f"{pid} was not claimable")
        store.partition_rows.save_progress(pid, rec.claim_token, [i * 2], 100, 0, writer=name)
        store.partition_rows.complete(pid, rec.claim_token, cursor=[i * 2 + 1], success=100, writer=name)


def _process_claimer(url: str, prefix: str, ids: list[str], n: int, start: Any) -> tuple[int, float]:
    with open_store_url(url, prefix) as store:
        store.partition_rows.partition(ids[0])  # connected before the clock starts
        statements = _count_statements(store)
        statements[0] = 0
        start.wait()
        cpu0 = time.process_time()
        _work(store, ids, f"c{n}", "bench-run")
        cpu = time.process_time() - cpu0
    return statements[0], cpu


def _run_threads(store: CoordinationStore, shares: list[list[str]]) -> tuple[float, int, float]:
    statements = _count_statements(store)
    # warm the pool to one connection per claimer, as a worker process would be after its first tasks
    conns = [store.engine.connect() for _ in shares]
    for conn in conns:
        conn.close()
    statements[0] = 0
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            _work(store, shares[n], f"c{n}", "bench-run")
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(shares))]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall, statements[0], time.process_time() - cpu0


def _run_processes(url: str, prefix: str, shares: list[list[str]]) -> tuple[float, int, float]:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Barrier(len(shares) + 1)
        with ctx.Pool(len(shares)) as pool:
            results = [
                pool.apply_async(_process_claimer, (url, prefix, share, n, start)) for n, share in enumerate(shares)
            ]
            start.wait()
            t0 = time.perf_counter()
            done = [r.get(timeout=900) for r in results]
            wall = time.perf_counter() - t0
    return wall, sum(s for s, _ in done), sum(c for _, c in done)


def _host_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs so far, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _commit_ms(store: CoordinationStore, pid: str, token: int) -> float:
    """Latency of one durable commit, alone: the floor of a single claimer's step."""
    t0 = time.perf_counter()
    for _ in range(50):
        store.partition_rows.heartbeat(pid, token)
    return (time.perf_counter() - t0) / 50 * 1000


def bench_claims(
    kind: str, url: str, partitions: int = 4000, claimers: int = 16, mode: str = "threads"
) -> dict[str, Any]:
    prefix = f"b{uuid.uuid4().hex[:6]}_"
    with open_store_url(url, prefix) as store:
        try:
            job = store.job_rows.create_job(["bench"], {}, "bench")
            store.partition_rows.add_partitions(
                job.id, [PartitionSpec("bench", i, None, None, 100, 100, 0) for i in range(partitions + 1)]
            )
            ids = [p.id for p in store.partition_rows.partitions(job.id)]
            probe, ids = ids[0], ids[1:]
            rec = store.partition_rows.claim(probe, "probe", "probe-run", 600)
            assert rec is not None
            commit_ms = _commit_ms(store, probe, rec.claim_token)
            shares = [ids[n::claimers] for n in range(claimers)]
            busy0, total0 = _host_busy()
            if mode == "processes":
                wall, statements, client_cpu = _run_processes(url, prefix, shares)
            else:
                wall, statements, client_cpu = _run_threads(store, shares)
            busy1, total1 = _host_busy()
            done = store.partition_stats.stats(job.id)["bench"].partitions.get("COMPLETED", 0)
            assert done == partitions, (done, partitions)
            settings = _settings(store)
        finally:
            store.t.metadata.drop_all(store.engine)
    host_busy = (busy1 - busy0) / max(total1 - total0, 1.0)
    client_cores = client_cpu / wall
    rate = partitions / wall
    per_claim = statements / partitions
    line: dict[str, Any] = {
        "bench": "claims",
        "store": kind,
        **settings,
        "claimers": claimers,
        "claimers_as": mode,
        "partitions": partitions,
        "claims_per_s": round(rate),
        "statements_per_claim": round(per_claim, 2),
        "path": "claim -> save_progress -> complete(folded)",
        "commits_per_claim": 3,
        "single_commit_ms": round(commit_ms, 3),
        "client_cpu_cores": round(client_cores, 2),
        "host_cpu_busy": round(host_busy, 2),
    }
    line["bound_by"] = _bound_by(mode, client_cores, host_busy, commit_ms, rate * 3, claimers)
    return line


def _settings(store: CoordinationStore) -> dict[str, Any]:
    """What durability the measured connections really had."""
    with store.engine.connect() as conn:
        name = store.engine.dialect.name
        if name == "postgresql":
            fsync = conn.execute(sa.text("SHOW fsync")).scalar_one()
            sync = conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()
            return {"durable": fsync == "on" and sync == "on", "fsync": fsync, "synchronous_commit": sync}
        if name == "mysql":
            flush = int(conn.execute(sa.text("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")).scalar_one())
            return {"durable": flush == 1, "innodb_flush_log_at_trx_commit": flush}
        sync_level = int(conn.execute(sa.text("PRAGMA synchronous")).scalar_one())
        return {"durable": sync_level >= 2, "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[sync_level]}


def _bound_by(mode: str, client_cores: float, host_busy: float, commit_ms: float, commits_per_s: float, n: int) -> str:
    serial_commits = 1000 / commit_ms if commit_ms else float("inf")
    facts = (
        f"host CPU {host_busy:.0%} busy on {os.cpu_count()} cores, client Python {client_cores:.2f} cores, "
        f"{commits_per_s:.0f} commits/s from {n} claimers vs {serial_commits:.0f}/s for one alone "
        f"({commit_ms:.2f} ms per durable commit)"
    )
    if host_busy >= 0.9:
        who = "the GIL-bound client" if mode == "threads" and client_cores >= 0.9 else "client and server together"
        return f"CPU: {who} saturate the machine; {facts}"
    if mode == "threads" and client_cores >= 0.9:
        return f"GIL: one client process spends a whole core; {facts}"
    return f"commit latency (WAL flush per commit, grouped across claimers); {facts}"


def main_lines(partitions: int | None = None, claimers: int | None = None, mode: str | None = None) -> list[str]:
    """One JSON line per store (bench/run.py calls this)."""
    n = partitions or int(os.environ.get("CLAIMS_PARTITIONS", "4000"))
    c = claimers or int(os.environ.get("CLAIMS_CLAIMERS", "16"))
    m = mode or os.environ.get("CLAIMS_MODE", "processes")
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-claims-"))
    runs: list[tuple[str, str, Callable[[], Any]]] = [
        ("sqlite", f"sqlite:///{work / 'claims.db'}", _nothing),
        ("postgres", PG, lambda: durable_postgres(PG)),
        ("mysql", MYSQL, lambda: durable_mysql(MYSQL)),
    ]
    lines = []
    for kind, url, durability in runs:
        with durability():
            lines.append(orjson.dumps(bench_claims(kind, url, n, c, m)).decode())
    return lines


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    for out in main_lines():
        print(out, flush=True)
