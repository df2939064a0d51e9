"""Change-capture benchmarks, one JSON line each, for PostgreSQL (wal2json slot) and MariaDB (binlog).

- ``sync_latency``: a writer commits single-row updates at a steady ``BENCH_SYNC_RATE`` (500/s)
  for ``BENCH_SYNC_SECONDS`` while a sync runs; the latency of a commit is the time from just
  after its COMMIT returned to the moment the sync acknowledged a batch holding it (its documents
  were rebuilt and durably written: searchable). A commit's position is read right after it
  (PostgreSQL: the WAL insert position, at or past the commit's end, so a commit may count one
  batch late: the figures err high; MariaDB: the session's own GTID, exact).
- ``catch_up``: ``BENCH_CATCHUP_CHANGES`` (1,000,000) row changes committed while nobody syncs
  (``UPDATE`` statements over ``BENCH_CATCHUP_ROWS`` products), then ``sync --until-caught-up``
  in-process, timed from its start to its return: the replay of a backlog, e.g. after a long
  rebuild.

``BENCH_SYNC_SOURCES`` (``postgres,mysql``). Both start one local Spark session (``local[2]``).

    BENCH=sync .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.changes.helpers import Shop, commit_position, drop_shop, make_shop
from tests.conftest import MYSQL_URL, PG_URL

from sparkindex.changes.runner import SyncRun
from sparkindex.config.model import SparkConfig
from sparkindex.spark.session import build_session

SERVICES = {"postgres": PG_URL, "mysql": MYSQL_URL}


@contextmanager
def shop_on(kind: str, products: int, spark: Any) -> Iterator[Shop]:
    work = Path(tempfile.mkdtemp(prefix=f"sparkindex-bench-sync-{kind}-"))
    shop = make_shop(kind, work / "shop", SERVICES, products=products)
    try:
        shop.reindex(spark)
        shop.sync(spark)  # the consumer's position (and slot) from here on
        yield shop
    finally:
        drop_shop(kind, shop, SERVICES)
        shutil.rmtree(work, ignore_errors=True)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bench_sync_latency(kind: str, spark: Any) -> dict[str, Any]:
    rate = int(os.environ.get("BENCH_SYNC_RATE", "500"))
    seconds = float(os.environ.get("BENCH_SYNC_SECONDS", "20"))
    with shop_on(kind, 2000, spark) as shop:
        acks: list[tuple[int, float]] = []
        run = SyncRun(shop.pipeline, None, spark_factory=lambda: spark)
        run.on_ack = lambda position: acks.append((position, time.time()))
        runner = threading.Thread(target=run.run, daemon=True)
        runner.start()
        if not run.streaming.wait(300):
            raise RuntimeError("the sync did not start")
        commits: list[tuple[int, float]] = []
        engine = shop.engine()
        with engine.connect() as conn:
            start = time.monotonic()
            n = 0
            while time.monotonic() - start < seconds:
                due = start + n / rate
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the writer at the target rate
                conn.exec_driver_sql("UPDATE products SET stock = stock + 1 WHERE id = %(id)s", {"id": n % 2000 + 1})
                commits.append((commit_position(kind, conn), time.time()))
                n += 1
            achieved = n / (time.monotonic() - start)
        engine.dispose()
        last = commits[-1][0]
        deadline = time.monotonic() + 300
        while not any(p >= last for p, _ in acks) and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the sync to acknowledge the last commit
        run.stop_requested.set()
        runner.join(120)
    latencies = []
    for position, committed in commits:
        acked = next((t for p, t in acks if p >= position), None)
        if acked is not None:
            latencies.append(max(0.0, acked - committed) * 1000)
    return {
        "bench": "sync_latency",
        "source": kind,
        "changes_per_s": rate,
        "achieved_per_s": round(achieved, 1),
        "changes": len(commits),
        "acknowledged": len(latencies),
        "batches": len(acks),
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(_percentile(latencies, 99), 1) if latencies else None,
    }


def bench_catch_up(kind: str, spark: Any) -> dict[str, Any]:
    changes = int(os.environ.get("BENCH_CATCHUP_CHANGES", "1000000"))
    rows = int(os.environ.get("BENCH_CATCHUP_ROWS", "100000"))
    with shop_on(kind, rows, spark) as shop:
        statements = max(1, changes // rows)
        for _ in range(statements):
            shop.sql("UPDATE products SET stock = stock + 1")
        made = statements * rows
        started = time.monotonic()
        summary = shop.sync(spark)
        took = time.monotonic() - started
    return {
        "bench": "catch_up",
        "source": kind,
        "changes": made,
        "documents_rebuilt": summary.applied,
        "batches": summary.batches,
        "seconds": round(took, 1),
        "changes_per_s": round(made / took, 1),
    }


def main_lines() -> Iterator[dict[str, Any]]:
    kinds = [k.strip() for k in os.environ.get("BENCH_SYNC_SOURCES", "postgres,mysql").split(",") if k.strip()]
    spark = build_session(SparkConfig(master="local[2,4]"))
    try:
        for kind in kinds:
            for bench in (bench_sync_latency, bench_catch_up):
                try:
                    yield bench(kind, spark)
                except Exception as exc:  # noqa: BLE001 - one failing line must not hide the others
                    yield {"bench": bench.__name__.removeprefix("bench_"), "source": kind, "error": repr(exc)[-800:]}
    finally:
        spark.stop()


if __name__ == "__main__":
    import orjson

    for line in main_lines():
        print(orjson.dumps(line).decode(), flush=True)
