"""PostgreSQL benchmarks: document building and reindex (imported by bench/run.py; claims: bench/claims.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import generate_shop, write_demo_pipeline
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.documents.in_database import JsonAggregationBuilder
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.e2e.shop import copy_shop, fresh_database  # noqa: E402

PG = "postgresql://sparkindex@127.0.0.1:55432/sparkindex"
MYSQL = "mysql://root@127.0.0.1:53306/sparkindex"


def services() -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "test-services.sh")], check=True, capture_output=True)


def _docs_per_s(builder: DocumentBuilder) -> float:
    t0, after, n = time.perf_counter(), None, 0
    while True:
        page = builder.page(KeyRange(None, None), after, 1000)
        n += len(page.docs)
        if page.rows < 1000:
            return n / (time.perf_counter() - t0)
        after = page.last_key


def copy_ceiling(url: str, builder: JsonAggregationBuilder) -> float:
    """COPY (the document query) TO STDOUT: how fast PostgreSQL alone hands documents over."""
    engine = sa.create_engine(normalize_url(url))
    sql = str(
        builder.statement(KeyRange(None, None), None, None).compile(engine, compile_kwargs={"literal_binds": True})
    )
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        t0, n = time.perf_counter(), 0
        with cur.copy(f"COPY ({sql}) TO STDOUT") as copy:  # type: ignore[attr-defined]
            for _row in copy.rows():
                n += 1
        return n / (time.perf_counter() - t0)
    finally:
        raw.close()
        engine.dispose()


def bench_postgres(rows: int, work: Path) -> list[dict[str, Any]]:
    generate_shop(work / "shop.db", rows)
    url = fresh_database(PG, "bench_shop")
    copy_shop(work / "shop.db", url)
    path = write_demo_pipeline(work, partition_size=max(5000, rows // 32))
    text = path.read_text().replace("url: sqlite:///shop.db", f"url: {url}")
    text = text.replace("url: sqlite:///.sparkindex/state.db", f"url: {url}\n  prefix: bench_")
    path.write_text(text)
    pipeline = load_pipeline(path)
    with open_source_url(pipeline.source_url()) as source:
        plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
        in_db = JsonAggregationBuilder(source, plan)
        python_rate, db_rate = _docs_per_s(DocumentBuilder(source, plan)), _docs_per_s(in_db)
        ceiling = copy_ceiling(url, in_db)
    summary = ReindexJob(pipeline, new=True).run()
    assert summary.indexed == rows, summary
    rate = rows / summary.seconds
    return [
        {
            "bench": "build_postgres",
            "rows": rows,
            "python_docs_per_s": round(python_rate),
            "database_docs_per_s": round(db_rate),
            "chosen": "python" if python_rate >= db_rate else "database",
        },
        {
            "bench": "reindex_postgres",
            "rows": rows,
            "docs_per_s": round(rate),
            "source_ceiling_docs_per_s": round(ceiling),
            "ratio": round(rate / ceiling, 3),
        },
    ]


def main_lines(rows: int, work: Path) -> list[str]:
    services()
    if rows == 0:  # BENCH_ROWS=0: nothing to build (the claims benchmark is bench/claims.py)
        return []
    return [orjson.dumps(b).decode() for b in bench_postgres(rows, work)]
