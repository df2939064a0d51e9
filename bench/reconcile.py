"""``reconcile``: a sync healing a gap in its change log, against a full reindex of the same index.

A gap is never skipped: when the log cannot serve a consumer group's position (here: the alias has an index
but the group holds no offset for it), ``sparkindex sync`` takes the log position now, P, runs the
Spark-partitioned verify/repair of the alias (unchanged documents are only hashed and compared,
not written), stores P and streams from there. The figure is that sync's docs/s against the
reindex's on the same data in the same run, both end to end as a user runs them (subprocesses,
Spark start-up included), timed by their wall clocks. The aim: reconcile at least 2x the reindex.

The data: the shop at ``BENCH_ROWS`` in SQLite, each table given an indexed integer ``rev`` column
(0) for polling change capture. The pipeline first has no ``changes:``; ``reindex --new`` builds the
index. Then drift is planted in the source (1 % of the products updated, 0.1 % deleted with their
reviews, 0.1 % inserted, all with ``rev = 1``), ``changes: {column: rev}`` is added, and
``sync --until-caught-up`` finds the gap and reconciles. The bench fails unless the sync exits 0,
its ``reconciled`` counts are exactly the planted drift, and ``verify`` is clean afterwards.

``reconcile_step_s`` is the time between the sync's two log lines around the repair ("reconciling"
and "gap reconciled"): the verify/repair alone, Spark start-up included, without the interpreter
start, the stream from P and the exit; ``second_pass_s`` is the part of it spent verifying again
after the repair (read from the coordination store). ``reindex_job_s`` is the reindex's own clock.

    BENCH=reconcile BENCH_ROWS=1000000 .venv/bin/python -m bench.run
    BENCH_QUICK=1 BENCH=reconcile .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.large import cli_command, last_json, run_cli
from sparkindex.demo.shop import generate_shop, write_demo_pipeline

TABLES = ("categories", "users", "products", "reviews")
#: shares of the products changed behind the index's back
UPDATED, DELETED, INSERTED = 0.01, 0.001, 0.001


@dataclass(frozen=True)
class TimedRun:
    summary: dict[str, Any]
    seconds: float
    returncode: int
    #: (seconds since the start, line) for every stderr line, stamped as it arrived
    stderr: list[tuple[float, str]]


def run_timed(pipeline: Path, verb: str, *extra: str, timeout: float = 3600) -> TimedRun:
    """Like bench.large.run_cli, with every stderr line stamped on arrival (the CLI logs carry no time)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cli_command(pipeline, verb, *extra),
        cwd=pipeline.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[tuple[float, str]] = []
    out: list[str] = []

    def pump_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.perf_counter() - t0, line.rstrip("\n")))

    def pump_out() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    threads = [threading.Thread(target=pump_err, daemon=True), threading.Thread(target=pump_out, daemon=True)]
    for t in threads:
        t.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if code not in (0, 1):
        tail = "\n".join(line for _, line in lines[-40:])
        raise RuntimeError(f"sparkindex {verb} exited {code}: {tail[-3000:]}")
    return TimedRun(last_json("".join(out)), wall, code, lines)


def add_rev_columns(db: Path) -> None:
    """An integer ``rev`` on every watched table, indexed as a polled column would be in production
    (without the index, every poll and each look at the log's head scans the tables)."""
    with sqlite3.connect(db) as conn:
        for table in TABLES:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN rev INTEGER NOT NULL DEFAULT 0")
            conn.execute(f"CREATE INDEX {table}_rev ON {table}(rev)")


def plant_drift(db: Path, rows: int, seed: int = 11) -> dict[str, int]:
    """Change the source behind the index's back; return what verify must find."""
    rng = random.Random(seed)
    n_updated, n_deleted, n_inserted = (max(1, int(rows * share)) for share in (UPDATED, DELETED, INSERTED))
    picked = rng.sample(range(1, rows + 1), n_updated + n_deleted)
    updated, deleted = picked[:n_updated], picked[n_updated:]
    with sqlite3.connect(db) as conn:
        conn.executemany("UPDATE products SET stock = stock + 1, rev = 1 WHERE id = ?", [(i,) for i in updated])
        conn.executemany("DELETE FROM reviews WHERE product_id = ?", [(i,) for i in deleted])
        conn.executemany("DELETE FROM products WHERE id = ?", [(i,) for i in deleted])
        conn.executemany(
            "INSERT INTO products (id, name, description, price, stock, category_id, created_at, rev) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
            [
                (rows + k, f"new item {rows + k}", "planted by the bench", 9.5, k, 1 + k % 40, "2026-01-01 00:00:00")
                for k in range(1, n_inserted + 1)
            ],
        )
    return {"missing": n_inserted, "stale": n_updated, "extra": n_deleted, "duplicates": 0}


def add_changes(pipeline: Path) -> None:
    """``indexes[0].changes: {column: rev}`` in the demo pipeline."""
    text = pipeline.read_text(encoding="utf-8")
    anchor = "    complexity: 3.0\n"
    if anchor not in text:
        raise RuntimeError(f"the demo pipeline changed shape; no {anchor.strip()!r} line in {pipeline}")
    pipeline.write_text(text.replace(anchor, anchor + "    changes:\n      column: rev\n", 1), encoding="utf-8")


def second_pass_seconds(work: Path) -> float | None:
    """How long the repair's second pass (verify again) took: the one pass the store records, read
    by plain SQL from the demo's coordination database (the table found by its name's suffix)."""
    try:
        with sqlite3.connect(work / ".sparkindex" / "state.db") as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            table = min((n for n in names if n.endswith("verify_run")), key=len)
            row = conn.execute(f"SELECT report_json FROM {table} WHERE trigger = 'sync-gap'").fetchone()
        return round(float(orjson.loads(row[0])["seconds"]), 2)
    except (sqlite3.Error, ValueError, TypeError, KeyError):  # a figure for the record, not a check
        return None


def step_seconds(lines: list[tuple[float, str]], start: str, end: str) -> float | None:
    began = next((t for t, line in lines if start in line), None)
    ended = next((t for t, line in lines if end in line), None)
    return None if began is None or ended is None else ended - began


def bench_reconcile(rows: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-reconcile-"))
    try:
        db = work / "shop.db"
        t0 = time.perf_counter()
        generate_shop(db, rows)
        add_rev_columns(db)
        generated = time.perf_counter() - t0
        pipeline = write_demo_pipeline(work, partition_size=max(5000, rows // 32))
        reindex = run_cli(pipeline, "reindex", "--new")
        if reindex.summary.get("status") != "COMPLETED" or reindex.summary.get("indexed") != rows:
            raise RuntimeError(f"the reindex did not index {rows} documents: {reindex.summary}")

        planted = plant_drift(db, rows)
        docs = rows - planted["extra"] + planted["missing"]  # the source's documents now
        add_changes(pipeline)
        sync = run_timed(pipeline, "sync", "--until-caught-up")
        found = sync.summary.get("reconciled", {}).get("products")
        if sync.returncode != 0 or found != planted:
            tail = "\n".join(line for _, line in sync.stderr[-20:])
            raise RuntimeError(
                f"the sync did not reconcile the planted drift {planted}: exit {sync.returncode}, "
                f"summary {sync.summary}\n{tail}"
            )
        verify = run_cli(pipeline, "verify")
        report = verify.summary
        drift = {k: report.get(k) for k in ("missing", "extra", "stale", "duplicates")}
        if verify.returncode != 0 or report.get("checked") != docs or any(drift.values()):
            raise RuntimeError(f"verify after the reconciliation is not clean: {report}")

        step = step_seconds(sync.stderr, "reconciling", "gap reconciled")
        second = second_pass_seconds(work)
        rate, reindex_rate = docs / sync.seconds, rows / reindex.seconds
        return {
            "bench": "reconcile",
            "rows": rows,
            "reconcile_docs_s": round(rate),
            "reindex_docs_s": round(reindex_rate),
            "ratio_reindex": round(rate / reindex_rate, 3),
            "reconciled": found,
            "seconds": round(sync.seconds, 2),
            "reindex_seconds": round(reindex.seconds, 2),
            "reconcile_step_s": None if step is None else round(step, 2),
            "second_pass_s": second,  # of the step: verify again after the repair (only logged)
            "reindex_job_s": round(float(reindex.summary["seconds"]), 2),
            "sync_applied": sync.summary.get("applied"),
            "generate_s": round(generated, 1),
            "cores": os.cpu_count(),
            "load_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews both sides
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
