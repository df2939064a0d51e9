"""Benchmarks: one JSON line each. Figures are ratios against a baseline measured in the same run.

Lines, selected with ``BENCH`` (comma-separated; default ``all``):

- ``pg``: claims per store and document building/reindex from PostgreSQL (bench/pg.py);
- ``claims``: the claims benchmark of the product's real claim path (bench/claims.py);
- ``claims_scale``: the same path from 1 (the floor), 64, 256 and 1,024 simulated executors, each
  with a store of its own, through PgBouncer in transaction pooling and directly
  (bench/claims_scale.py);
- ``tantivy``: ``reindex_tantivy``, the shop's small documents, end to end (bench/large.py);
- ``large``: ``reindex_tantivy_large``, ~2 KB nested documents from SQLite and PostgreSQL;
- ``wide``: ``reindex_tantivy_wide``, orders with about 4 nested rows of 16 typed columns under a
  three-level object chain, from SQLite and PostgreSQL, against the naive loop (``ratio_naive``)
  and an independent hand-written loop that shares none of the package's code
  (``ratio_independent``, bench/independent.py; bench/wide.py);
- ``shaped``: ``reindex_tantivy_shaped``, the wide shape with a ``where:`` keeping half the roots
  and two computed fields, against the same data's unshaped pipeline in the same run: source rows
  a second and the wall time ratio shaped/unshaped (``ratio_seconds``; bench/shaped.py);
- ``transform_cache``: where an ``on_change`` transform's stored outputs are read from, µs per
  document for pages of 1,000 ids: the store's transform cache (PostgreSQL, SQLite) against
  reading them back from the index (Tantivy, osmem-server), ratios in the same run
  (bench/transform_cache.py);
- ``resume``: a full run, a SIGKILL at half way, the rerun, verify (bench/resume.py);
- ``memory``: peak RSS per Spark Python worker at a small and a large row count (bench/memory.py);
- ``verify``: verify of a clean index (range checksums first) against the same run's full reindex,
  the shop at ``BENCH_ROWS``, one line per source of ``BENCH_VERIFY_SOURCES`` (bench/verify.py);
- ``reconcile``: a sync healing a gap in its change log (verify/repair on Spark) against the same
  index's full reindex, the shop at ``BENCH_ROWS`` with 1 % planted drift, one line per source of
  ``BENCH_RECONCILE_SOURCES`` (bench/reconcile.py);
- ``null``: ``reindex_null``, ~2 KB nested documents from PostgreSQL into a null bulk endpoint
  (the pipeline's own cost) against a COPY ceiling and the PGSync peer figure (bench/null.py);
- ``sync``: ``sync_latency`` (commit to searchable at a steady rate) and ``catch_up`` (a backlog
  replayed), PostgreSQL and MariaDB (bench/sync.py);
- ``chaos``: the seeded fault campaign (chaos/), ``CHAOS_TRIALS`` trials (default 30) from
  ``CHAOS_SEED`` (default 1); its summary line, an error line when a trial was not clean.

Every reindex figure is end to end (``sparkindex reindex`` as a subprocess, Spark start-up
included) against the naive single-process loop (bench/naive.py) on the same data in the same run.

Sizes: ``BENCH_ROWS`` (shop and pg, default 1,000,000), ``BENCH_LARGE_ROWS`` (default 500,000),
``BENCH_RESUME_ROWS`` (default: the large rows; ``BENCH_RESUME_SOURCE`` postgres or sqlite),
``BENCH_MEMORY_SMALL``/``BENCH_MEMORY_LARGE`` (100,000 / 1,000,000, partitions of
``BENCH_MEMORY_PARTITION`` = 10,000 rows), ``BENCH_LARGE_SOURCES`` (sqlite,postgres),
``BENCH_WIDE_ROWS`` (default 500,000), ``BENCH_WIDE_SOURCES`` (sqlite,postgres),
``BENCH_SHAPED_ROWS`` (default 500,000), ``BENCH_SHAPED_SOURCES`` (sqlite,postgres),
``BENCH_VERIFY_SOURCES`` and ``BENCH_RECONCILE_SOURCES`` (sqlite,postgres),
``BENCH_NULL_ROWS`` (default 1,000,000), ``BENCH_NULL_MEMORY_SMALL`` (default a quarter of it) and
``BENCH_TRANSFORM_CACHE_DOCS`` / ``_PAGE`` / ``_ROUNDS`` (20,000 / 1,000 / 5),
``BENCH_CLAIMS_SCALE_SIZES`` (1,64,256,1024 executors) / ``_PARTITIONS`` (8 per executor) /
``_PROCESSES`` (8). ``BENCH_QUICK=1`` shrinks every default for a smoke run on a busy machine.

    make bench
    BENCH=large,resume BENCH_LARGE_ROWS=500000 .venv/bin/python -m bench.run
    BENCH_QUICK=1 BENCH=tantivy,large,resume,memory .venv/bin/python -m bench.run
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
ALL = (
    "pg",
    "claims",
    "claims_scale",
    "tantivy",
    "large",
    "wide",
    "shaped",
    "transform_cache",
    "resume",
    "memory",
    "null",
    "verify",
    "reconcile",
    "sync",
    "chaos",
)
QUICK = {
    "BENCH_ROWS": "20000",
    "BENCH_LARGE_ROWS": "20000",
    "BENCH_WIDE_ROWS": "20000",
    "BENCH_SHAPED_ROWS": "20000",
    "BENCH_TRANSFORM_CACHE_DOCS": "5000",
    "BENCH_RESUME_ROWS": "20000",
    "BENCH_MEMORY_SMALL": "10000",
    "BENCH_MEMORY_LARGE": "50000",
    "BENCH_MEMORY_PARTITION": "2000",
    "BENCH_NULL_ROWS": "20000",
    "BENCH_CATCHUP_CHANGES": "20000",
    "BENCH_CATCHUP_ROWS": "2000",
    "BENCH_SYNC_SECONDS": "10",
    "BENCH_CLAIMS_SCALE_SIZES": "1,16,64",
}


def selected() -> list[str]:
    raw = os.environ.get("BENCH", "all").strip() or "all"
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if "all" in names:
        return list(ALL)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        sys.exit(f"BENCH: unknown {', '.join(unknown)} (known: all, {', '.join(ALL)})")
    return names


def services() -> None:
    """The PostgreSQL (and MariaDB) test servers; idempotent, reuses running ones."""
    subprocess.run(["bash", str(ROOT / "scripts" / "test-services.sh")], check=True, capture_output=True)


def emit(lines: Iterable[str | dict[str, object]]) -> bool:
    """Print each line; False if any of them reports an error."""
    ok = True
    for line in lines:
        text = line if isinstance(line, str) else orjson.dumps(line).decode()
        ok = ok and '"error"' not in text
        print(text, flush=True)
    return ok


def pg_lines(rows: int) -> list[str]:
    from bench.pg import main_lines

    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-pg-"))
    try:
        return main_lines(rows, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def claims_lines() -> list[str]:
    try:
        claims = importlib.import_module("bench.claims")  # written separately; may not exist yet
    except ModuleNotFoundError as exc:
        if exc.name != "bench.claims":
            raise
        print("note: bench/claims.py does not exist yet; skipping the claims line", file=sys.stderr)
        return []
    return list(claims.main_lines())


def large_lines(rows: int) -> Iterable[str]:
    from bench.large import main_lines  # one line per source; a failing source yields an error line

    sources = os.environ.get("BENCH_LARGE_SOURCES", "sqlite,postgres").split(",")
    return main_lines(tuple(s.strip() for s in sources if s.strip()), rows)


def wide_lines() -> Iterable[str]:
    from bench.wide import main_lines  # one line per source; a failing source yields an error line

    sources = os.environ.get("BENCH_WIDE_SOURCES", "sqlite,postgres").split(",")
    return main_lines(tuple(s.strip() for s in sources if s.strip()))


def shaped_lines() -> Iterable[str]:
    from bench.shaped import main_lines  # one line per source; a failing source yields an error line

    sources = os.environ.get("BENCH_SHAPED_SOURCES", "sqlite,postgres").split(",")
    return main_lines(tuple(s.strip() for s in sources if s.strip()))


def verify_lines(name: str, rows: int) -> Iterable[dict[str, object]]:
    """``verify`` or ``reconcile``: one line per source; a failing source yields an error line."""
    from bench.verify import sources_from_env

    sources = sources_from_env(f"BENCH_{name.upper()}_SOURCES")
    lines: Iterable[dict[str, object]] = importlib.import_module(f"bench.{name}").main_lines(sources, rows)
    return lines


def null_lines() -> list[dict[str, object]]:
    from bench.null import bench_null  # imported only when selected

    return [bench_null()]


def chaos_lines() -> list[dict[str, object]]:
    """The campaign as its own process (it starts and restarts servers of its own); its trials'
    lines go to stderr, its summary is the bench line."""
    done = subprocess.run([sys.executable, "-m", "chaos"], cwd=ROOT, capture_output=True, text=True)
    lines = [orjson.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for line in lines[:-1]:
        if not line.get("ok"):
            print(orjson.dumps(line).decode(), file=sys.stderr)
    if not lines or lines[-1].get("bench") != "chaos":
        return [{"bench": "chaos", "error": f"exit {done.returncode}: {done.stderr[-800:]}"}]
    summary: dict[str, object] = lines[-1]
    if summary["clean"] != summary["trials"]:
        summary["error"] = f"{int(str(summary['trials'])) - int(str(summary['clean']))} trial(s) not clean"
    return [summary]


def main() -> None:
    if os.environ.get("BENCH_QUICK"):
        for key, value in QUICK.items():
            os.environ.setdefault(key, value)
    rows = int(os.environ.get("BENCH_ROWS", "1000000"))
    large_rows = int(os.environ.get("BENCH_LARGE_ROWS", "500000"))
    names = selected()
    servers = {"pg", "claims", "claims_scale", "large", "wide", "shaped", "transform_cache", "resume", "null", "sync"}
    servers |= {"verify", "reconcile"}  # their PostgreSQL lines
    if servers & set(names):
        services()
    from bench.large import bench_shop
    from bench.memory import bench_memory
    from bench.resume import bench_resume

    runs: dict[str, Callable[[], Iterable[str | dict[str, object]]]] = {
        "pg": lambda: pg_lines(rows),
        "claims": claims_lines,
        # BENCH_CLAIMS_SCALE_SIZES/_PARTITIONS/_PROCESSES, read by bench/claims_scale.py
        "claims_scale": lambda: importlib.import_module("bench.claims_scale").main_lines(),
        "tantivy": lambda: [bench_shop(rows)],
        "large": lambda: large_lines(large_rows),
        "wide": wide_lines,  # BENCH_WIDE_ROWS, read by bench/wide.py
        "shaped": shaped_lines,  # BENCH_SHAPED_ROWS, read by bench/shaped.py
        # BENCH_TRANSFORM_CACHE_DOCS/_PAGE/_ROUNDS, read by bench/transform_cache.py
        "transform_cache": lambda: importlib.import_module("bench.transform_cache").main_lines(),
        "resume": lambda: [bench_resume()],
        "memory": lambda: [bench_memory()],
        "null": null_lines,
        # one line per source of BENCH_VERIFY_SOURCES / BENCH_RECONCILE_SOURCES (sqlite,postgres)
        "verify": lambda: verify_lines("verify", rows),
        "reconcile": lambda: verify_lines("reconcile", rows),
        "sync": lambda: importlib.import_module("bench.sync").main_lines(),  # sync_latency, catch_up
        "chaos": chaos_lines,
    }
    failed = []
    for name in names:
        try:  # one failing benchmark must not hide the others' lines
            if not emit(runs[name]()):
                failed.append(name)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            failed.append(name)
            emit([{"bench": name, "error": f"{type(exc).__name__}: {exc}"[-800:]}])
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
