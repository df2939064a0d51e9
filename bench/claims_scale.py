"""Claims at cluster scale: 64, 256 and 1,024 concurrent executors on one store, through PgBouncer
in transaction pooling and directly against PostgreSQL, durable.

Why: ``bench/claims.py`` measures 16 claimers, a small cluster. A large cluster's question is
another one: how many executors one store serves before the time tasks spend coordinating
becomes a noticeable share of their work, and whether PgBouncer lets a store accept more
executors than PostgreSQL has connections. docs/deploy.md ("Connections and cluster scale")
turns these figures into that model.

A *simulated executor* is one thread with a ``CoordinationStore`` of its own
(:func:`sparkindex.resources.open_store_url`): its own engines, pool and direct connection, as a
Spark Python worker caches one store for its life (``spark.context.worker_context``). It runs
the product's real partition path over its share of one job's partition ids, the same calls
``bench/claims.py`` makes: ``claim`` -> ``save_progress`` (the heartbeat of an acknowledged
batch) -> ``complete``, back to back, so every executor is in the store's path all the time
(the worst case: a stage whose tasks all coordinate at once). Threads, not processes, because
1,024 Python processes do not fit in 2 cores' memory and start-up; the threads are spread over
``processes`` (default 8) OS processes so that no single GIL carries them all. Each executor's
idle pooled connection (left by opening the store) is closed before the clock starts: what is
measured is the direct connection the hot path uses, so N executors are N client connections
(a real worker also keeps that one idle pooled connection: 2 per worker; the model counts it).

Measured per size and path: claims/s over the whole run (first claim to last complete), p50 and
p99 of the ``claim`` call alone and of the whole cycle, the client's CPU, and the store's CPU:
utime+stime from ``/proc/<pid>/stat`` of every process of the PostgreSQL data directory
(the postmaster of ``postmaster.pid`` and its children: backends, WAL writer, checkpointer) and,
separately, of PgBouncer, before and after the timed part, per claim. The machine is shared, so
the store's CPU includes whatever else ran on it meanwhile; compare paths of the same run.

Direct runs only where PostgreSQL has the connections (``max_connections`` less the ones in use
and a margin); a size that does not fit is reported as not run, with the numbers, never forced:
the server is shared and a refusal would be someone else's failed test.

Sizes: 1 (the floor: one executor alone, ``ALONE`` partitions, the latency nobody contends
with), 64, 256 and 1,024, each executor with ``PER_EXECUTOR`` = 8 partitions, so every statement
runs more than psycopg's 5 times on one connection (its threshold to prepare it on the server,
which PgBouncer's transaction pooling before 1.21 cannot carry: a regression fails this line).

Run: ``python -m bench.claims_scale`` or ``BENCH=claims_scale python -m bench.run`` (env:
BENCH_CLAIMS_SCALE_SIZES, default 1,64,256,1024; BENCH_CLAIMS_SCALE_PARTITIONS per executor,
default 8; BENCH_CLAIMS_SCALE_PROCESSES, default 8).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import resource
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from bench.claims import PG, _show, durable_postgres
from sparkindex.coordination.records import PartitionSpec
from sparkindex.coordination.store import CoordinationStore
from sparkindex.resources import open_store_url

PGBOUNCER = "postgresql://sparkindex@127.0.0.1:56432/sparkindex"
SERVICES = Path("/tmp/sparkindex-services")
PG_DATA = SERVICES / "pg"
PGBOUNCER_PID = SERVICES / "pgbouncer" / "pgbouncer.pid"
#: 1 is the floor: one executor alone, the latency of a cycle nobody contends with
SIZES = (1, 64, 256, 1024)
#: partitions per executor: past psycopg's prepare threshold (5 runs of a statement on one
#: connection), so a store that prepared statements would fail here behind PgBouncer
PER_EXECUTOR = 8
#: the lone executor's partitions (its latencies are the model's floor: enough of them for a p99)
ALONE = 64
#: connections left free on the shared server beside a direct run (the suite, the bench's own)
DIRECT_MARGIN = 20
#: how long any step waits for the others before the run is abandoned
WAIT_S = 300.0
TICK = os.sysconf("SC_CLK_TCK")


# -- one simulated executor, and a process of them --------------------------------------------------
@dataclass
class Timings:
    claim_ms: list[float] = field(default_factory=list)
    cycle_ms: list[float] = field(default_factory=list)
    first: float = float("inf")  # time.monotonic() of the first claim (one clock for every process)
    last: float = 0.0  # ... and of the last complete's end


def _cycle(store: CoordinationStore, pid: str, name: str, i: int, into: Timings) -> None:
    """One partition, exactly as bench/claims.py runs it; timed."""
    rows = store.partition_rows
    t0 = time.perf_counter()
    rec = rows.claim(pid, name, "bench-run", stale_after_s=600)
    t1 = time.perf_counter()
    if rec is None:
        raise AssertionError(f"{pid} was not claimable")
    rows.save_progress(pid, rec.claim_token, [i * 2], 100, 0, writer=name)
    rows.complete(pid, rec.claim_token, cursor=[i * 2 + 1], success=100, writer=name)
    t2 = time.perf_counter()
    into.claim_ms.append((t1 - t0) * 1000)
    into.cycle_ms.append((t2 - t0) * 1000)


def _executor(
    url: str,
    prefix: str,
    ids: list[str],
    name: str,
    ready: threading.Barrier,
    go: threading.Event,
    abandon: threading.Event,
    out: Timings,
    errors: list[str],
) -> None:
    """Connect, wait for the start, run every partition of *ids*, wait until the store's CPU
    was read, close. Any failure breaks *ready* for the whole group."""
    store: CoordinationStore | None = None
    try:
        store = open_store_url(url, prefix)
        store.engine.dispose()  # the idle pooled connection of opening (closed first: N, never 2N, at once)
        store.partition_rows.direct_connections.connection()  # connected before the clock starts
        ready.wait(WAIT_S)  # connected
        go.wait(WAIT_S)
        if abandon.is_set():
            return
        out.first = time.monotonic()
        for i, pid in enumerate(ids):
            _cycle(store, pid, name, i, out)
        out.last = time.monotonic()
        ready.wait(WAIT_S)  # done
        ready.wait(WAIT_S)  # the parent has read the store's CPU: every backend lived through it
    except threading.BrokenBarrierError:
        pass
    except BaseException as exc:  # noqa: BLE001 - reported by the group to the parent
        errors.append(f"{name}: {type(exc).__name__}: {exc}")
        ready.abort()
    finally:
        if store is not None:
            store.close()


def _group(url: str, prefix: str, shares: list[list[str]], first_n: int, barrier: Any, results: Any) -> None:
    """One OS process running len(shares) simulated executors as threads (the process's main
    thread passes the cross-process barrier for them all)."""
    _raise_nofile(len(shares) * 2 + 256)
    ready = threading.Barrier(len(shares) + 1)
    go, abandon = threading.Event(), threading.Event()
    errors: list[str] = []
    timings = [Timings() for _ in shares]
    threads = [
        threading.Thread(
            target=_executor,
            args=(url, prefix, share, f"e{first_n + n}", ready, go, abandon, timings[n], errors),
            name=f"e{first_n + n}",
        )
        for n, share in enumerate(shares)
    ]
    for t in threads:
        t.start()
    try:
        ready.wait(WAIT_S)  # every executor connected
        barrier.wait(WAIT_S)  # every group connected: the parent reads the store's CPU
        barrier.wait(WAIT_S)  # ... and lets them go
        cpu0 = time.process_time()
        go.set()
        ready.wait(WAIT_S)  # every executor done
        cpu = time.process_time() - cpu0
    except threading.BrokenBarrierError:
        abandon.set()
        go.set()
        ready.abort()
        barrier.abort()
        results.put(([], [], 0.0, 0.0, 0.0, errors or [f"group {first_n}: a barrier broke (another group failed)"]))
        for t in threads:
            t.join(WAIT_S)
        return
    merged = Timings()
    for one in timings:
        merged.claim_ms += one.claim_ms
        merged.cycle_ms += one.cycle_ms
        merged.first, merged.last = min(merged.first, one.first), max(merged.last, one.last)
    results.put((merged.claim_ms, merged.cycle_ms, merged.first, merged.last, cpu, errors))
    try:
        barrier.wait(WAIT_S)  # the parent has read the store's CPU after
        ready.wait(WAIT_S)  # the executors close their stores
    except threading.BrokenBarrierError:
        ready.abort()
    for t in threads:
        t.join(WAIT_S)


def _raise_nofile(want: int) -> None:
    """Each client connection is a file descriptor: raise the soft limit (never the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


# -- the store's CPU --------------------------------------------------------------------------------
def _cpu_s(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _postgres_pids() -> list[int]:
    """The postmaster of the data directory and its children."""
    postmaster = int((PG_DATA / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == postmaster:
                pids.append(int(entry.name))
    return pids


def _cpu_snapshot() -> tuple[dict[int, float], float]:
    """(CPU-seconds of each PostgreSQL process, of PgBouncer)."""
    pg = {pid: cpu for pid in _postgres_pids() if (cpu := _cpu_s(pid)) is not None}
    bouncer = _cpu_s(int(PGBOUNCER_PID.read_text().split()[0])) if PGBOUNCER_PID.exists() else None
    return pg, bouncer or 0.0


def _pg_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between the snapshots: a process born meanwhile counts whole, one that ended
    meanwhile cannot be counted (every backend of the benchmark lives through both)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


# -- one size on one path ---------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _drain(results: Any, n: int) -> list[Any]:
    """What the groups reported before the run broke (a few seconds for each)."""
    got = []
    for _ in range(n):
        try:
            got.append(results.get(timeout=5))
        except Exception:  # noqa: BLE001 - queue.Empty: that group said nothing
            break
    return got


def direct_room(executors: int) -> str | None:
    """Why a direct run of *executors* connections would not fit PostgreSQL now; None if it fits."""
    engine = sa.create_engine(PG.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            most = int(conn.execute(sa.text("SHOW max_connections")).scalar_one())
            reserved = int(conn.execute(sa.text("SHOW superuser_reserved_connections")).scalar_one())
            used = int(
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
                ).scalar_one()
            )
    finally:
        engine.dispose()
    free = most - reserved - used - DIRECT_MARGIN
    if executors <= free:
        return None
    return (
        f"{executors} connections needed, PostgreSQL has max_connections={most} "
        f"({reserved} reserved, {used} in use, {DIRECT_MARGIN} kept free): not run"
    )


def run_size(url: str, path: str, prefix: str, executors: int, per_executor: int, processes: int) -> dict[str, Any]:
    """One job of executors x per_executor partitions, claimed by *executors* simulated executors."""
    with open_store_url(PG, prefix) as setup:  # the job made on the direct path: setup is not measured
        job = setup.job_rows.create_job(["bench"], {}, "bench")
        n = executors * per_executor
        setup.partition_rows.add_partitions(
            job.id, [PartitionSpec("bench", i, None, None, 100, 100, 0) for i in range(n)]
        )
        ids = [p.id for p in setup.partition_rows.partitions(job.id)]
    shares = [ids[e::executors] for e in range(executors)]
    groups = min(processes, executors)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(groups + 1)
    results = ctx.Queue()
    procs = []
    for g in range(groups):
        mine = list(range(g, executors, groups))
        procs.append(
            ctx.Process(target=_group, args=(url, prefix, [shares[e] for e in mine], g * 10_000, barrier, results))
        )
    t_setup = time.monotonic()
    for p in procs:
        p.start()
    done: list[Any] = []
    try:
        barrier.wait(WAIT_S)  # all connected
        setup_s = time.monotonic() - t_setup
        pg0, bouncer0 = _cpu_snapshot()
        barrier.wait(WAIT_S)  # go
        done = [results.get(timeout=WAIT_S) for _ in procs]
        pg1, bouncer1 = _cpu_snapshot()
        barrier.wait(WAIT_S)  # measured: they may close
    except threading.BrokenBarrierError:
        barrier.abort()
        done += _drain(results, len(procs) - len(done))
        raise RuntimeError(f"a group failed: {[e for d in done for e in d[5]][:3]}") from None
    finally:
        for p in procs:
            p.join(WAIT_S)
            if p.is_alive():
                p.kill()
    errors = [e for d in done for e in d[5]]
    if errors:
        raise RuntimeError(f"{len(errors)} executor error(s), first: {errors[0]}")
    claim_ms = [x for d in done for x in d[0]]
    cycle_ms = [x for d in done for x in d[1]]
    wall = max(d[3] for d in done) - min(d[2] for d in done)
    client_cpu = sum(d[4] for d in done)
    with open_store_url(PG, prefix) as check:
        parts = check.partition_rows.partitions(job.id)
    completed = sum(1 for p in parts if p.status.value == "COMPLETED" and p.claims == 1)
    claims = len(claim_ms)
    if not (completed == claims == n):
        raise AssertionError(f"{n} partitions, {claims} claims, {completed} completed after exactly one claim")
    store_cpu = _pg_delta(pg0, pg1)
    return {
        "bench": "claims_scale",
        "path": path,
        "executors": executors,
        "executors_as": f"threads with a store each, in {groups} processes",
        "partitions": n,
        "claims": claims,
        "completed_once": completed,
        "seconds": round(wall, 3),
        "claims_per_s": round(claims / wall, 1),
        "claim_ms_p50": round(_pct(claim_ms, 0.5), 2),
        "claim_ms_p99": round(_pct(claim_ms, 0.99), 2),
        "cycle_ms_p50": round(_pct(cycle_ms, 0.5), 2),
        "cycle_ms_p99": round(_pct(cycle_ms, 0.99), 2),
        "store_cpu_ms_per_claim": round(store_cpu / claims * 1000, 3),
        "pgbouncer_cpu_ms_per_claim": round((bouncer1 - bouncer0) / claims * 1000, 3) if path == "pgbouncer" else None,
        "client_cpu_ms_per_claim": round(client_cpu / claims * 1000, 3),
        "client_cpu_cores": round(client_cpu / wall, 2),
        "setup_s": round(setup_s, 1),
        "load_avg_1m": float(Path("/proc/loadavg").read_text().split()[0]),
    }


def bench_claims_scale(
    sizes: tuple[int, ...] = SIZES,
    per_executor: int = PER_EXECUTOR,
    processes: int = 8,
    paths: tuple[str, ...] = ("direct", "pgbouncer"),
    durable: bool = True,
) -> list[dict[str, Any]]:
    """Every size, direct first (the baseline), then through PgBouncer with its ratio to it.
    *durable* False leaves the server's settings alone (the smoke test: ALTER SYSTEM would reach
    every test running beside it)."""
    _raise_nofile(max(sizes) * 2 + 256)
    prefix = f"cs{uuid.uuid4().hex[:6]}_"
    urls = {"direct": PG, "pgbouncer": PGBOUNCER}
    lines: list[dict[str, Any]] = []
    open_store_url(PG, prefix).close()  # the schema made directly, before any run
    try:
        with durable_postgres(PG) if durable else contextlib.nullcontext():
            settings = _show(PG, ["fsync", "synchronous_commit"])
            for size in sizes:
                direct: dict[str, Any] | None = None
                for path in paths:
                    refused = direct_room(size) if path == "direct" else None
                    if refused:
                        lines.append({"bench": "claims_scale", "path": path, "executors": size, "not_run": refused})
                        continue
                    per = max(per_executor, ALONE) if size == 1 else per_executor
                    line = run_size(urls[path], path, prefix, size, per, processes)
                    line["durable"] = settings == {"fsync": "on", "synchronous_commit": "on"}
                    line.update(settings)
                    if path == "direct":
                        direct = line
                    elif direct is not None:
                        line["ratio_claims_per_s_vs_direct"] = round(line["claims_per_s"] / direct["claims_per_s"], 3)
                    lines.append(line)
    finally:
        with open_store_url(PG, prefix) as store:
            store.t.metadata.drop_all(store.engine)
    return lines


def main_lines(sizes: tuple[int, ...] | None = None) -> list[str]:
    """One JSON line per size and path (bench/run.py calls this)."""
    raw = os.environ.get("BENCH_CLAIMS_SCALE_SIZES", ",".join(map(str, SIZES)))
    chosen = sizes or tuple(int(s) for s in raw.split(",") if s.strip())
    per = int(os.environ.get("BENCH_CLAIMS_SCALE_PARTITIONS", str(PER_EXECUTOR)))
    procs = int(os.environ.get("BENCH_CLAIMS_SCALE_PROCESSES", "8"))
    return [orjson.dumps(line).decode() for line in bench_claims_scale(chosen, per, procs)]


if __name__ == "__main__":
    for out in main_lines():
        print(out, flush=True)
