"""Benchmarks: one JSON line each. Figures are ratios against a baseline measured in the same run.

reindex_tantivy: the full pipeline (Spark local mode, all cores) against a naive single-process
loop over the same data: keyset pages, the same document builder, one Tantivy writer.

    BENCH_ROWS=1000000 make bench
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import orjson
import sqlalchemy as sa
import tantivy

from sparkindex.config import load_pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import generate_shop, write_demo_pipeline
from sparkindex.documents import DocumentBuilder, infer_mapping, resolve_index
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.sources.base import KeyRange
from sparkindex.sources.registry import open_source
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json


def naive_loop(pipeline_path: Path, out_dir: Path) -> tuple[float, float]:
    """keyset read -> build -> one Tantivy writer, in one process; returns (docs/s, cores used).

    Tantivy's writer indexes on its own threads, so this "single process" already keeps about
    1.5 of our 2 cores busy: that, not the pipeline, is what bounds the achievable ratio here.
    """
    pipeline = load_pipeline(pipeline_path)
    source = open_source(pipeline.source_url())
    plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
    builder = DocumentBuilder(source, plan)
    schema, sp = build_schema(infer_mapping(plan, "indexes[0]"))
    out_dir.mkdir(parents=True)
    index = tantivy.Index(schema, path=str(out_dir))
    writer = index.writer(256 * 1024 * 1024, 2)
    key_pos = [builder.read_columns.index(c) for c in plan.id_columns]
    started, cpu0 = time.perf_counter(), time.process_time()
    after, n = None, 0
    while True:
        rows = source.read_page(plan.table, plan.id_columns, builder.read_columns, KeyRange(None, None), after, 1000)
        docs, _ = builder.build(rows)
        for d in docs:
            writer.add_json(to_tantivy_json(d.id, d.source, d.hash, sp))
        n += len(docs)
        if len(rows) < 1000:
            break
        after = tuple(rows[-1][i] for i in key_pos)
    writer.commit()
    writer.wait_merging_threads()
    wall = time.perf_counter() - started
    return n / wall, (time.process_time() - cpu0) / wall


def bench_reindex_tantivy(rows: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-"))
    try:
        generate_shop(work / "shop.db", rows)
        path = write_demo_pipeline(work, partition_size=max(5000, rows // 32))
        naive, naive_cores = naive_loop(path, work / "naive-index")
        pipeline = load_pipeline(path)
        summary = ReindexJob(pipeline, new=True).run()
        assert summary.indexed == rows, summary
        store = CoordinationStore(pipeline.coordination_url())
        parts = store.partitions(summary.job_id)
        with store.engine.connect() as conn:
            t = store.t.partition
            lo, hi = conn.execute(
                sa.select(sa.func.min(t.c.claimed_at), sa.func.max(t.c.completed_at)).where(
                    t.c.job_id == summary.job_id
                )
            ).one()
        steady = rows / (hi - lo)  # first claim to last completion: without Spark's start-up
        e2e = rows / summary.seconds
        return {
            "bench": "reindex_tantivy",
            "rows": rows,
            "docs_per_s": round(e2e),
            "steady_docs_per_s": round(steady),
            "naive_docs_per_s": round(naive),
            "ratio": round(e2e / naive, 3),
            "steady_ratio": round(steady / naive, 3),
            "naive_cpu_cores": round(naive_cores, 2),
            "partitions": len(parts),
            "cores": os.cpu_count(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    rows = int(os.environ.get("BENCH_ROWS", "1000000"))
    only = os.environ.get("BENCH", "all")
    if only in ("all", "pg"):
        from bench.pg import main_lines

        work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-pg-"))
        try:
            for line in main_lines(rows, work):
                print(line, flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if only in ("all", "tantivy"):
        print(orjson.dumps(bench_reindex_tantivy(rows)).decode(), flush=True)


if __name__ == "__main__":
    main()
