"""Change-capture benchmarks, one JSON line each, for PostgreSQL (wal2json slot) and MariaDB (binlog).

- ``sync_latency``: a writer commits single-row updates at a steady ``BENCH_SYNC_RATE`` (500/s)
  for ``BENCH_SYNC_SECONDS`` while a sync runs, once the sync has applied its first change (the
  start-up before that is reported apart, ``first_ack_s``); the latency of a commit is the time from just
  after its COMMIT returned to the moment the sync acknowledged a batch holding it (its documents
  were rebuilt and durably written: searchable). A commit's position is read right after it
  (PostgreSQL: the WAL insert position, at or past the commit's end, so a commit may count one
  batch late: the figures err high; MariaDB: the session's own GTID, exact).
- ``catch_up``: ``BENCH_CATCHUP_CHANGES`` (1,000,000) row changes committed while nobody syncs
  (``UPDATE`` statements over ``BENCH_CATCHUP_ROWS`` products), then ``sync --until-caught-up``
  in-process, timed from its start to its return: the replay of a backlog, e.g. after a long
  rebuild.

- ``pg_decoding``: the PostgreSQL reader chosen by measurement: SQL slot functions against
  psycopg2's streaming replication on the same 200,000 row changes.

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

from tests.capture.helpers import Shop, commit_position, drop_shop, make_shop
from tests.conftest import MYSQL_URL, PG_URL

from sparkindex.capture.sync.run import SyncRun
from sparkindex.config.connections import SparkConfig
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


def _acknowledged(acks: list[tuple[int, float]], position: int, timeout: float) -> bool:
    """Wait until the sync has acknowledged a batch reaching *position*; whether it did in time."""
    deadline = time.monotonic() + timeout
    while not any(p >= position for p, _ in acks):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)  # acks are appended by the sync's thread
    return True


def bench_sync_latency(kind: str, spark: Any) -> dict[str, Any]:
    rate = int(os.environ.get("BENCH_SYNC_RATE", "500"))
    seconds = float(os.environ.get("BENCH_SYNC_SECONDS", "20"))
    with shop_on(kind, 2000, spark) as shop:
        acks: list[tuple[int, float]] = []
        run = SyncRun(shop.pipeline, None, spark_factory=lambda: spark)
        run.on_ack = lambda position: acks.append((position, time.time()))
        runner = threading.Thread(target=run.run, daemon=True)
        runner.start()
        started = time.monotonic()
        if not run.streaming.wait(300):
            raise RuntimeError("the sync did not start")
        commits: list[tuple[int, float]] = []
        engine = shop.engine()
        with engine.connect() as conn:
            # steady state, as the line says: one change first, timed apart as the start-up (the
            # first trigger starts Spark's Python runner for the source, seconds on a busy machine)
            conn.exec_driver_sql("UPDATE products SET stock = stock + 1 WHERE id = 1")
            if not _acknowledged(acks, commit_position(kind, conn), 300):
                raise RuntimeError("the sync did not acknowledge its first change within 300 s")
            first_ack_s = time.monotonic() - started
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
        _acknowledged(acks, commits[-1][0], 300)  # unacknowledged commits are left out below
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
        "first_ack_s": round(first_ack_s, 1),  # start-up: the sync started -> its first change acknowledged
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


def _drop_slot_when_released(c: Any, slot: str, timeout_s: float = 30.0) -> None:
    """Drop *slot* once no walsender holds it. A closed streaming connection leaves its
    walsender running until the server notices the disconnect, and dropping a slot that is still
    active fails ("replication slot ... is active for PID ..."): `make bench` exited 2 on it."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = c.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        if row is None:
            return
        if row[0] is None:
            c.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"slot {slot!r} still held by walsender pid {row[0]} after {timeout_s:.0f} s")
        time.sleep(0.05)  # polling the server's own view of the slot, with a deadline


def bench_pg_decoding(rows: int = 100_000) -> dict[str, Any]:
    """The choice of PostgreSQL reader, measured: the same 2 x *rows* row changes decoded through
    the SQL slot functions (peek 50,000, then advance: what the sync does) and through psycopg2's
    streaming ``LogicalReplicationConnection`` (one message at a time, feedback every 10,000)."""
    import psycopg
    import psycopg2
    import psycopg2.extras

    dsn = PG_URL
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("DROP TABLE IF EXISTS bench_decoding")
    c.execute("CREATE TABLE bench_decoding (id int primary key, v int)")
    c.execute("INSERT INTO bench_decoding SELECT g, 0 FROM generate_series(1, %s) g", (rows,))
    slots = ("bench_dec_sql", "bench_dec_stream")
    streams: list[Any] = []
    for slot in slots:
        _drop_slot_when_released(c, slot)
        c.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (slot,))
    try:
        for _ in range(2):
            c.execute("UPDATE bench_decoding SET v = v + 1")
        target = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
        while c.execute("SELECT pg_current_wal_flush_lsn() >= %s", (target,)).fetchone()[0] is not True:  # type: ignore[index]
            time.sleep(0.05)  # decoding reads flushed WAL only (synchronous_commit = off here)
        options = ("format-version", "2", "include-transaction", "1", "add-tables", "public.bench_decoding")
        started, n = time.monotonic(), 0
        while True:
            got = c.execute(
                "SELECT lsn, data FROM pg_logical_slot_peek_changes(%s, NULL, 50000, %s, %s, %s, %s, %s, %s)",
                (slots[0], *options),
            ).fetchall()
            if not got:
                break
            n += len(got)
            c.execute("SELECT pg_replication_slot_advance(%s, %s)", (slots[0], got[-1][0]))
        sql_rate = n / (time.monotonic() - started)
        stream = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        streams.append(stream)
        cur = stream.cursor()
        settings = dict(zip(options[::2], options[1::2], strict=True))
        cur.start_replication(slot_name=slots[1], decode=False, options=settings)
        started, m = time.monotonic(), 0
        while m < n:
            msg = cur.read_message()
            if msg is None:
                time.sleep(0.001)  # nothing buffered yet
                continue
            m += 1
            if m % 10_000 == 0:
                cur.send_feedback(flush_lsn=msg.data_start)
        stream_rate = m / (time.monotonic() - started)
    finally:
        for opened in streams:
            opened.close()
        for slot in slots:
            _drop_slot_when_released(c, slot)
        c.execute("DROP TABLE IF EXISTS bench_decoding")
        c.close()
    return {
        "bench": "pg_decoding",
        "rows": n,
        "sql_peek_advance_rows_per_s": round(sql_rate),
        "psycopg2_stream_rows_per_s": round(stream_rate),
    }


def main_lines() -> Iterator[dict[str, Any]]:
    kinds = [k.strip() for k in os.environ.get("BENCH_SYNC_SOURCES", "postgres,mysql").split(",") if k.strip()]
    if "postgres" in kinds:
        try:
            yield bench_pg_decoding()
        except Exception as exc:  # noqa: BLE001 - one failing line must not hide the others
            yield {"bench": "pg_decoding", "error": repr(exc)[-800:]}
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
