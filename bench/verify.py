"""``verify`` on Spark against the reindex's own speed, on the same data in the same run.

The shop (small documents with a category, reviews and their authors) at ``BENCH_ROWS``: one
``sparkindex reindex --new`` and then one ``sparkindex verify``, both end to end as a user runs
them (subprocesses, Spark start-up included), both timed by their wall clocks. Verify reads both
sides (it builds every document the way the reindex does and looks its hash up in the index by
id) but writes nothing, and the index is clean, so its index side (the search for extra
documents) is skipped, as it is after every successful reindex. ``job_ratio`` compares the
commands' own clocks (without interpreter and JVM start-up).

    BENCH=verify BENCH_ROWS=1000000 .venv/bin/python -m bench.run
    BENCH_QUICK=1 BENCH=verify .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.large import run_cli
from sparkindex.demo.shop import generate_shop, write_demo_pipeline


def bench_verify(rows: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-verify-"))
    try:
        t0 = time.perf_counter()
        generate_shop(work / "shop.db", rows)
        generated = time.perf_counter() - t0
        pipeline = write_demo_pipeline(work, partition_size=max(5000, rows // 32))
        reindex = run_cli(pipeline, "reindex", "--new")
        if reindex.summary.get("status") != "COMPLETED" or reindex.summary.get("indexed") != rows:
            raise RuntimeError(f"the reindex did not index {rows} documents: {reindex.summary}")
        verify = run_cli(pipeline, "verify")
        report = verify.summary
        drift = {k: report.get(k) for k in ("missing", "extra", "stale", "duplicates")}
        if verify.returncode != 0 or report.get("checked") != rows or any(drift.values()):
            raise RuntimeError(f"verify of a fresh index is not clean: {report}")
        rate, reindex_rate = rows / verify.seconds, rows / reindex.seconds
        job_rate, reindex_job_rate = rows / float(report["seconds"]), rows / float(reindex.summary["seconds"])
        return {
            "bench": "verify",
            "rows": rows,
            "docs_per_s": round(rate),
            "reindex_docs_per_s": round(reindex_rate),
            "ratio": round(rate / reindex_rate, 3),
            "seconds": round(verify.seconds, 2),
            "reindex_seconds": round(reindex.seconds, 2),
            "job_ratio": round(job_rate / reindex_job_rate, 3),  # the commands' own clocks
            "ranges": report["aliases"]["products"]["ranges"],
            "generate_s": round(generated, 1),
            "cores": os.cpu_count(),
            "load_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews both sides
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
