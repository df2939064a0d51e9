"""``verify`` of a clean index against the same run's full reindex, from SQLite and PostgreSQL.

The shop (small documents with a category, reviews and their authors) at ``BENCH_ROWS``, once per
source of ``BENCH_VERIFY_SOURCES`` (default ``sqlite,postgres``): one ``sparkindex reindex --new``
and then one ``sparkindex verify`` of the index it built, both end to end as a user runs them
(subprocesses, Spark start-up included) and timed by their wall clocks; each also by its own job
clock (the ``seconds`` of its ``--json`` summary: without interpreter and JVM start-up).

Verify compares each key range by checksums first (count and summed per-document checks, inside
PostgreSQL where it can, else built in the workers; the index side by the engine's aggregation)
and descends to id-by-id comparison only in ranges that differ. The line carries what verify
reports per alias: ``path`` (``checksums`` or ``documents``, with ``path_reason`` when it is
``documents``) and ``ranges`` (``source``, ``index``, ``compared``, ``matched``, ``descended``), so
a reader sees whether the fast path was taken. The aim: ``ratio`` (the reindex's wall seconds over
verify's) at least 5 on PostgreSQL and 2 on SQLite; ``aim_met`` says whether this run met it.

The line fails (raises) unless the reindex COMPLETED with every row and verify exits 0, clean, with
every row checked. PostgreSQL gets a database of its own per run (source and coordination store),
loaded from the same generated SQLite file with COPY and dropped afterwards.

    BENCH=verify BENCH_ROWS=1000000 .venv/bin/python -m bench.run
    BENCH_QUICK=1 BENCH=verify BENCH_VERIFY_SOURCES=postgres .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.large import PG_SERVER, CliRun, run_cli
from sparkindex.demo.shop import generate_shop, write_demo_pipeline

SOURCES = ("sqlite", "postgres")
#: the issue's aims: verify of a clean index this many times faster than the reindex (wall clocks)
AIM = {"postgres": 5.0, "sqlite": 2.0}
#: the shop's tables in load order, with their columns (as sparkindex.demo.shop makes them)
TABLES: dict[str, tuple[str, ...]] = {
    "categories": ("id", "name", "description"),
    "users": ("id", "name", "country"),
    "products": ("id", "name", "description", "price", "stock", "category_id", "created_at"),
    "reviews": ("id", "product_id", "author_id", "rating", "body"),
}
#: the shop's schema on PostgreSQL: the types copy_shop (tests/e2e/shop.py) gives it; keys,
#: foreign keys and the reviews' index are added after the rows (COPY into bare tables)
PG_TABLES = """
CREATE TABLE categories (id integer NOT NULL, name varchar(64) NOT NULL, description text{rev});
CREATE TABLE users (id integer NOT NULL, name varchar(100) NOT NULL, country varchar(2){rev});
CREATE TABLE products (
  id integer NOT NULL, name text NOT NULL, description text, price double precision NOT NULL,
  stock integer NOT NULL, category_id integer, created_at timestamp NOT NULL{rev}
);
CREATE TABLE reviews (
  id integer NOT NULL, product_id integer NOT NULL, author_id integer NOT NULL, rating integer NOT NULL,
  body text{rev}
);
"""
PG_CONSTRAINTS = """
ALTER TABLE categories ADD PRIMARY KEY (id);
ALTER TABLE users ADD PRIMARY KEY (id);
ALTER TABLE products ADD PRIMARY KEY (id);
ALTER TABLE reviews ADD PRIMARY KEY (id);
ALTER TABLE products ADD FOREIGN KEY (category_id) REFERENCES categories (id);
ALTER TABLE reviews ADD FOREIGN KEY (product_id) REFERENCES products (id);
ALTER TABLE reviews ADD FOREIGN KEY (author_id) REFERENCES users (id);
CREATE INDEX reviews_product ON reviews (product_id);
"""
REV_COLUMN = ", rev integer NOT NULL DEFAULT 0"


@dataclass(frozen=True)
class Shop:
    """The shop in one source, with its pipeline (the demo's, pointed at that source)."""

    source: str  # "sqlite" or "postgres"
    pipeline: Path
    #: SQLite: the database file; PostgreSQL: the generated file it was loaded from
    sqlite_db: Path
    #: PostgreSQL: the libpq URL of the run's own database; SQLite: None
    pg_url: str | None
    generate_s: float
    load_s: float  # PostgreSQL: COPY, keys, index, VACUUM ANALYZE; SQLite: 0


def partition_size(rows: int) -> int:
    """The reindex's partitions and verify's ranges alike: about 32 of them."""
    return max(5000, rows // 32)


def add_rev_columns(db: Path) -> None:
    """An integer ``rev`` on every table of the SQLite shop, indexed as a polled column would be in
    production (without the index, every poll and each look at the log's head scans the tables)."""
    with sqlite3.connect(db) as conn:
        for table in TABLES:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN rev INTEGER NOT NULL DEFAULT 0")
            conn.execute(f"CREATE INDEX {table}_rev ON {table}(rev)")


def pg_admin_url() -> str:
    return PG_SERVER.replace("+psycopg", "")


def create_pg_database() -> tuple[str, str]:
    """A fresh database on the test server, named for this run (tests and a bench may run at
    once); returns (name, libpq URL)."""
    import psycopg

    name = f"bench_verify_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return name, pg_admin_url().rsplit("/", 1)[0] + f"/{name}"


def drop_pg_database(name: str) -> None:
    import psycopg

    with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def load_postgres(sqlite_db: Path, url: str, rev: bool) -> None:
    """The generated shop into PostgreSQL with COPY (same rows, same ids), then its keys, foreign
    keys and indexes, and VACUUM ANALYZE: the tables as a maintained production database has them."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn, sqlite3.connect(sqlite_db) as lite:
        conn.execute(PG_TABLES.format(rev=REV_COLUMN if rev else ""))
        for table, columns in TABLES.items():
            names = ", ".join(columns)
            with conn.cursor() as cur, cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in lite.execute(f"SELECT {names} FROM {table} ORDER BY id"):
                    copy.write_row(row)
        conn.execute(PG_CONSTRAINTS)
        if rev:
            for table in TABLES:
                conn.execute(f"CREATE INDEX {table}_rev ON {table} (rev)")
        conn.execute("VACUUM ANALYZE")


def point_at_postgres(pipeline: Path, url: str) -> None:
    """The demo pipeline's source and coordination store in the run's PostgreSQL database (the
    store's tables under a prefix), as bench/pg.py does."""
    text = pipeline.read_text(encoding="utf-8")
    for anchor in ("url: sqlite:///shop.db", "url: sqlite:///.sparkindex/state.db"):
        if anchor not in text:
            raise RuntimeError(f"the demo pipeline changed shape; no {anchor!r} line in {pipeline}")
    text = text.replace("url: sqlite:///shop.db", f"url: {url}")
    text = text.replace("url: sqlite:///.sparkindex/state.db", f"url: {url}\n  prefix: bench_")
    pipeline.write_text(text, encoding="utf-8")


@contextmanager
def shop(source: str, rows: int, work: Path, *, rev: bool = False) -> Iterator[Shop]:
    """The shop at *rows* products in *source* ("sqlite" or "postgres") under *work*, with the
    ``rev`` column of polling change capture when *rev*; yields it. PostgreSQL's database is
    the run's own, dropped on exit."""
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r} (known: {', '.join(SOURCES)})")
    work.mkdir(parents=True, exist_ok=True)
    db = work / "shop.db"
    t0 = time.perf_counter()
    generate_shop(db, rows)
    if rev and source == "sqlite":
        add_rev_columns(db)
    generated = time.perf_counter() - t0
    pipeline = write_demo_pipeline(work, partition_size=partition_size(rows))
    if source == "sqlite":
        yield Shop(source, pipeline, db, None, generated, 0.0)
        return
    name, url = create_pg_database()
    try:
        t0 = time.perf_counter()
        load_postgres(db, url, rev)
        loaded = time.perf_counter() - t0
        point_at_postgres(pipeline, url)
        yield Shop(source, pipeline, db, url, generated, loaded)
    finally:
        drop_pg_database(name)


def reindex_all(pipeline: Path, rows: int) -> CliRun:
    """``reindex --new``, end to end; raises unless it COMPLETED with every row indexed."""
    run = run_cli(pipeline, "reindex", "--new")
    s = run.summary
    if run.returncode != 0 or s.get("status") != "COMPLETED" or s.get("indexed") != rows or s.get("failed"):
        raise RuntimeError(f"the reindex did not index {rows} documents: exit {run.returncode}, {s}")
    return run


def verify_clean(pipeline: Path, docs: int, what: str) -> CliRun:
    """``verify``, end to end; raises unless it exits 0, clean, with *docs* documents checked."""
    run = run_cli(pipeline, "verify")
    report = run.summary
    drift = {k: report.get(k) for k in ("missing", "extra", "stale", "duplicates", "unbuildable")}
    if run.returncode != 0 or report.get("clean") is not True or report.get("checked") != docs or any(drift.values()):
        raise RuntimeError(f"verify {what} is not clean with {docs} documents checked: exit {run.returncode}, {report}")
    return run


def verify_paths(report: dict[str, Any]) -> dict[str, Any]:
    """What verify's ``--json`` says per alias of how it compared: path, why not by checksum, ranges."""
    aliases: dict[str, dict[str, Any]] = report.get("aliases") or {}
    return {
        "path": {a: r.get("path") for a, r in aliases.items()},
        "path_reason": {a: r.get("path_reason") for a, r in aliases.items() if r.get("path_reason")},
        "ranges": {a: r.get("ranges") for a, r in aliases.items()},
    }


def ratio(baseline: float, measured: float) -> float | None:
    return round(baseline / measured, 3) if measured > 0 else None


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)}  # other work skews both sides


def bench_verify(source: str, rows: int) -> dict[str, Any]:
    """One line: the reindex of the shop in *source*, then verify of the clean index it built."""
    work = Path(tempfile.mkdtemp(prefix=f"sparkindex-bench-verify-{source}-"))
    try:
        with shop(source, rows, work) as data:
            reindex = reindex_all(data.pipeline, rows)
            verify = verify_clean(data.pipeline, rows, "of the freshly built index")
        ratio_wall = ratio(reindex.seconds, verify.seconds)
        job_s, reindex_job_s = float(verify.summary["seconds"]), float(reindex.summary["seconds"])
        return {
            "bench": "verify",
            "source": source,
            "rows": rows,
            "seconds": round(verify.seconds, 2),  # verify, wall clock of the subprocess
            "job_s": round(job_s, 2),  # verify's own clock
            "reindex_seconds": round(reindex.seconds, 2),
            "reindex_job_s": round(reindex_job_s, 2),
            "ratio": ratio_wall,  # reindex wall seconds / verify wall seconds: the speed-up
            "job_ratio": ratio(reindex_job_s, job_s),
            "aim": AIM[source],
            "aim_met": ratio_wall is not None and ratio_wall >= AIM[source],
            "docs_per_s": round(rows / verify.seconds),
            "reindex_docs_per_s": round(rows / reindex.seconds),
            "checked": verify.summary.get("checked"),
            **verify_paths(verify.summary),
            "generate_s": round(data.generate_s, 1),
            "load_s": round(data.load_s, 1),
            **machine(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sources_from_env(name: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in os.environ.get(name, ",".join(SOURCES)).split(",") if s.strip())


def main_lines(sources: tuple[str, ...], rows: int) -> Iterator[dict[str, Any]]:
    """One line per source; a failing source yields an error line (and its traceback on stderr)."""
    for source in sources:
        try:
            yield bench_verify(source, rows)
        except Exception as exc:  # noqa: BLE001 - one failing line must not hide the others
            traceback.print_exc()
            yield {"bench": "verify", "source": source, "rows": rows, "error": f"{type(exc).__name__}: {exc}"[-800:]}


if __name__ == "__main__":
    for line in main_lines(tuple(sys.argv[1:]) or SOURCES, int(os.environ.get("BENCH_ROWS", "20000"))):
        print(orjson.dumps(line).decode(), flush=True)
