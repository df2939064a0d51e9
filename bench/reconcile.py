"""``reconcile``: a sync healing a gap in its change log, against a full reindex of the same index,
from SQLite and PostgreSQL.

A gap is never skipped: when the log cannot serve a consumer group's position (here: the alias has
an index but the group holds no offset for it), ``sparkindex sync`` takes the log position now, P,
runs the Spark-partitioned verify/repair of the alias (ranges compared by checksums first, id by id
only where they differ; unchanged documents are never written), stores P and streams from there.
The figure is that sync against the reindex of the same data in the same run, both end to end as a
user runs them (subprocesses, Spark start-up included) and timed by their wall clocks. The aim:
``ratio`` (the reindex's wall seconds over the sync's) at least 3 on PostgreSQL; ``aim_met`` says
whether this run met it (SQLite's line has no aim).

The data, once per source of ``BENCH_RECONCILE_SOURCES`` (default ``sqlite,postgres``): the shop at
``BENCH_ROWS``, each table given an indexed integer ``rev`` column (0) for polling change capture
(``indexes[].changes``, which docs/change-capture.md names for any database, PostgreSQL included;
``sync.source: auto`` polls when an index has ``changes:``). PostgreSQL gets a database of its own
per run (source and coordination store), loaded from the same generated SQLite file with COPY and
dropped afterwards. The pipeline first has no ``changes:``; ``reindex --new`` builds the index. Then
drift is planted in the source (1 % of the products updated, 0.1 % deleted with their reviews,
0.1 % inserted, all with ``rev = 1``), ``changes: {column: rev}`` is added, and
``sync --until-caught-up`` finds the gap and reconciles. The line fails (raises) unless the reindex
COMPLETED with every row, the sync exits 0 with ``reconciled`` exactly the planted drift, and
``verify`` afterwards exits 0, clean, with every document checked.

``reconcile_step_s`` is the time between the sync's two log lines around the repair ("reconciling"
and "gap reconciled"): the verify/repair alone, Spark start-up included, without the interpreter
start, the stream from P and the exit; ``job_ratio`` is the reindex's own clock over it (the sync
reports no job clock of its own). The sync's repair pass does not report how it compared (its
path and ranges); ``verify_path``/``verify_ranges`` are those of the clean verify afterwards.

    BENCH=reconcile BENCH_ROWS=1000000 .venv/bin/python -m bench.run
    BENCH_QUICK=1 BENCH=reconcile BENCH_RECONCILE_SOURCES=sqlite .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.large import cli_command, last_json
from bench.verify import SOURCES, Shop, machine, ratio, reindex_all, shop, verify_clean, verify_paths

#: shares of the products changed behind the index's back
UPDATED, DELETED, INSERTED = 0.01, 0.001, 0.001
#: the issue's aim: the 1 %-drift reconcile this many times faster than the reindex (wall clocks)
AIM: dict[str, float | None] = {"postgres": 3.0, "sqlite": None}


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


def plant_drift(data: Shop, rows: int, seed: int = 11) -> dict[str, int]:
    """Change the source behind the index's back (the same rows in either source); return what
    verify must find."""
    rng = random.Random(seed)
    n_updated, n_deleted, n_inserted = (max(1, int(rows * share)) for share in (UPDATED, DELETED, INSERTED))
    picked = rng.sample(range(1, rows + 1), n_updated + n_deleted)
    updated, deleted = picked[:n_updated], picked[n_updated:]
    inserted = [
        (rows + k, f"new item {rows + k}", "planted by the bench", 9.5, k, 1 + k % 40, "2026-01-01 00:00:00")
        for k in range(1, n_inserted + 1)
    ]
    statements: list[tuple[str, list[tuple[Any, ...]]]] = [
        ("UPDATE products SET stock = stock + 1, rev = 1 WHERE id = ?", [(i,) for i in updated]),
        ("DELETE FROM reviews WHERE product_id = ?", [(i,) for i in deleted]),
        ("DELETE FROM products WHERE id = ?", [(i,) for i in deleted]),
        (
            "INSERT INTO products (id, name, description, price, stock, category_id, created_at, rev) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
            inserted,
        ),
    ]
    if data.pg_url is None:
        with sqlite3.connect(data.sqlite_db) as conn:
            for sql, params in statements:
                conn.executemany(sql, params)
    else:
        import psycopg

        with psycopg.connect(data.pg_url) as pg, pg.cursor() as cur:  # one transaction, committed on exit
            for sql, params in statements:
                cur.executemany(sql.replace("?", "%s"), params)
    return {"missing": n_inserted, "stale": n_updated, "extra": n_deleted, "duplicates": 0}


def add_changes(pipeline: Path) -> None:
    """``indexes[0].changes: {column: rev}`` in the demo pipeline."""
    text = pipeline.read_text(encoding="utf-8")
    anchor = "    complexity: 3.0\n"
    if anchor not in text:
        raise RuntimeError(f"the demo pipeline changed shape; no {anchor.strip()!r} line in {pipeline}")
    pipeline.write_text(text.replace(anchor, anchor + "    changes:\n      column: rev\n", 1), encoding="utf-8")


def step_seconds(lines: list[tuple[float, str]], start: str, end: str) -> float | None:
    began = next((t for t, line in lines if start in line), None)
    ended = next((t for t, line in lines if end in line), None)
    return None if began is None or ended is None else ended - began


def bench_reconcile(source: str, rows: int) -> dict[str, Any]:
    """One line: the reindex of the shop in *source*, planted drift, the sync that reconciles it."""
    work = Path(tempfile.mkdtemp(prefix=f"sparkindex-bench-reconcile-{source}-"))
    try:
        with shop(source, rows, work, rev=True) as data:
            pipeline = data.pipeline
            reindex = reindex_all(pipeline, rows)
            planted = plant_drift(data, rows)
            docs = rows - planted["extra"] + planted["missing"]  # the source's documents now
            add_changes(pipeline)
            sync = run_timed(pipeline, "sync", "--until-caught-up")
            found = (sync.summary.get("reconciled") or {}).get("products")
            if sync.returncode != 0 or found != planted:
                tail = "\n".join(line for _, line in sync.stderr[-20:])
                raise RuntimeError(
                    f"the sync did not reconcile the planted drift {planted}: exit {sync.returncode}, "
                    f"summary {sync.summary}\n{tail}"
                )
            verify = verify_clean(pipeline, docs, "after the reconciliation")
        step = step_seconds(sync.stderr, "reconciling", "gap reconciled")
        reindex_job_s = float(reindex.summary["seconds"])
        ratio_wall = ratio(reindex.seconds, sync.seconds)
        aim = AIM.get(source)
        paths = verify_paths(verify.summary)
        return {
            "bench": "reconcile",
            "source": source,
            "rows": rows,
            "reconciled": found,
            "seconds": round(sync.seconds, 2),  # the sync, wall clock of the subprocess
            "reconcile_step_s": None if step is None else round(step, 2),  # its repair, from its log lines
            "reindex_seconds": round(reindex.seconds, 2),
            "reindex_job_s": round(reindex_job_s, 2),
            "ratio": ratio_wall,  # reindex wall seconds / sync wall seconds: the speed-up
            "job_ratio": None if not step else ratio(reindex_job_s, step),
            "aim": aim,
            "aim_met": None if aim is None else ratio_wall is not None and ratio_wall >= aim,
            "reconcile_docs_s": round(docs / sync.seconds),
            "reindex_docs_s": round(rows / reindex.seconds),
            "sync_applied": sync.summary.get("applied"),
            "verify_seconds": round(verify.seconds, 2),  # the clean verify after the sync
            "verify_job_s": round(float(verify.summary["seconds"]), 2),
            "verify_checked": verify.summary.get("checked"),
            "verify_path": paths["path"],
            "verify_path_reason": paths["path_reason"],
            "verify_ranges": paths["ranges"],
            "generate_s": round(data.generate_s, 1),
            "load_s": round(data.load_s, 1),
            **machine(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main_lines(sources: tuple[str, ...], rows: int) -> Iterator[dict[str, Any]]:
    """One line per source; a failing source yields an error line (and its traceback on stderr)."""
    for source in sources:
        try:
            yield bench_reconcile(source, rows)
        except Exception as exc:  # noqa: BLE001 - one failing line must not hide the others
            traceback.print_exc()
            yield {"bench": "reconcile", "source": source, "rows": rows, "error": f"{type(exc).__name__}: {exc}"[-800:]}


if __name__ == "__main__":
    for line in main_lines(tuple(sys.argv[1:]) or SOURCES, int(os.environ.get("BENCH_ROWS", "20000"))):
        print(orjson.dumps(line).decode(), flush=True)
