"""The "shaped" benchmark: the wide shape with a row filter keeping half the roots and two computed
fields, against the same data's unshaped pipeline in the same run.

Why: a filter and computed fields move work into the database (a ``WHERE`` over every row read,
two expressions per row kept) to save work after it (half the documents built, converted and
indexed). Filtering must cost less than it saves: the shaped run, which reads the same source rows
and indexes half of them, must take less wall time than the unshaped one. Both read the wide
dataset (bench/wide.py): orders with about 4 nested lines of 16 columns under a three-level object
chain. The shaped pipeline is the wide pipeline with, on its root::

    where: "id % 2 = 0"
    computed:
      reference: "number || '/' || status"
      total_cents: "CAST(ROUND(total * 100) AS INTEGER)"

Each side runs twice, alternated (unshaped, shaped, unshaped, shaped), each ``sparkindex reindex
--new`` end to end as a subprocess, and counts its faster run, as the wide line does. Rates are in
source rows a second (every root is read on both sides); ``ratio_seconds`` is the shaped run's wall
time over the unshaped one's (below 1: the filter pays for itself). The shaped documents are
checked first (``explain``: the computed fields are there, an odd id is filtered out) and the
shaped run must index exactly the even ids.

    BENCH=shaped BENCH_SHAPED_ROWS=500000 .venv/bin/python -m bench.run
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.large import cli_command, last_json, run_cli
from bench.wide import wide_dataset

FILTER = "id % 2 = 0"
COMPUTED = {"reference": "number || '/' || status", "total_cents": "CAST(ROUND(total * 100) AS INTEGER)"}
_ANCHOR = "    complexity: 4.0\n"


def default_rows() -> int:
    return int(os.environ.get("BENCH_SHAPED_ROWS", "500000"))


def shaped_text(wide_text: str, source_url: str) -> str:
    """The wide pipeline's text with the filter and the computed fields on its root index, reading
    *source_url*, with a coordination prefix of its own (a store shared with the unshaped
    pipeline keeps the two apart)."""
    if _ANCHOR not in wide_text:
        raise RuntimeError("bench/wide.py's pipeline changed: no 'complexity: 4.0' line to shape after")
    computed = "".join(f"      {name}: {orjson.dumps(sql).decode()}\n" for name, sql in COMPUTED.items())
    shape = f'    where: "{FILTER}"\n    computed:\n{computed}'
    lines = []
    for line in wide_text.replace(_ANCHOR, _ANCHOR + shape).splitlines(keepends=True):
        if line == "  url: sqlite:///wide.db\n":  # relative to the wide pipeline's folder
            line = f"  url: {source_url}\n"
        elif line == "  prefix: bench_\n":
            line = "  prefix: bench_shaped_\n"
        lines.append(line)
    return "".join(lines)


def write_shaped_pipeline(wide_pipeline: Path, source_url: str, folder: Path) -> Path:
    """``pipeline.yaml`` for the shaped run in *folder* (its own index and store beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pipeline.yaml"
    path.write_text(shaped_text(wide_pipeline.read_text(encoding="utf-8"), source_url), encoding="utf-8")
    return path


def check_shaped(pipeline: Path) -> None:
    """The shaped documents are what the pipeline says: computed fields present, an odd id out."""
    proc = subprocess.run(cli_command(pipeline, "explain"), cwd=pipeline.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"explain of the shaped pipeline exited {proc.returncode}: {proc.stderr[-2000:]}")
    doc = last_json(proc.stdout).get("document") or {}
    if doc.get("id") != 2 or not set(COMPUTED) <= set(doc):
        raise RuntimeError(f"the shaped pipeline's first document is not shaped: {str(doc)[:600]}")
    odd = subprocess.run(
        cli_command(pipeline, "explain", "--id", "1"), cwd=pipeline.parent, capture_output=True, text=True
    )
    filtered = last_json(odd.stdout).get("filtered") if odd.returncode == 0 else None
    if not filtered:
        raise RuntimeError(f"row 1 is not reported filtered out: exit {odd.returncode}: {odd.stderr[-1000:]}")


def _reindex(pipeline: Path, expected: int) -> tuple[float, Any]:
    run = run_cli(pipeline, "reindex", "--new")
    indexed = int(run.summary.get("indexed", -1))
    if run.summary.get("status") != "COMPLETED" or indexed != expected:
        raise RuntimeError(f"{pipeline} did not index {expected} documents: {run.summary}")
    return run.seconds, run.summary.get("seconds")


def bench_shaped(source: str, rows: int | None = None) -> dict[str, Any]:
    """The ``reindex_tantivy_shaped`` line for *source* ("sqlite" or "postgres")."""
    rows = default_rows() if rows is None else rows
    work = Path(tempfile.mkdtemp(prefix=f"sparkindex-bench-shaped-{source}-"))
    try:
        t0 = time.perf_counter()
        with wide_dataset(source, rows, work) as (wide, url):
            generated = time.perf_counter() - t0
            shaped = write_shaped_pipeline(wide, url, work / "shaped")
            check_shaped(shaped)
            kept = rows // 2
            plain_runs: list[float] = []
            shaped_runs: list[float] = []
            job_seconds: dict[str, list[Any]] = {"unshaped": [], "shaped": []}
            for _ in range(2):  # alternated: a slow minute of the shared machine hits both sides
                seconds, job = _reindex(wide, rows)
                plain_runs.append(round(seconds, 2))
                job_seconds["unshaped"].append(job)
                seconds, job = _reindex(shaped, kept)
                shaped_runs.append(round(seconds, 2))
                job_seconds["shaped"].append(job)
        plain, shaped_s = min(plain_runs), min(shaped_runs)
        ratio = round(shaped_s / plain, 3)
        return {
            "bench": "reindex_tantivy_shaped",
            "source": source,
            "rows": rows,
            "indexed": kept,
            "filter": FILTER,
            "computed": list(COMPUTED),
            # source rows a second: both sides read every root
            "docs_per_s": round(rows / shaped_s),
            "unshaped_docs_per_s": round(rows / plain),
            "ratio_seconds": ratio,
            "filter_pays": ratio < 1.0,
            "seconds": shaped_s,
            "unshaped_seconds": plain,
            "shaped_runs_s": shaped_runs,
            "unshaped_runs_s": plain_runs,
            # the job's own clock (without interpreter and JVM start) of each run
            "job_seconds_runs": job_seconds,
            "cores": os.cpu_count(),
            "load_1m": round(os.getloadavg()[0], 2),
            "generate_s": round(generated, 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main_lines(sources: tuple[str, ...] = ("sqlite", "postgres"), rows: int | None = None) -> Iterator[str]:
    for source in sources:
        try:
            yield orjson.dumps(bench_shaped(source, rows)).decode()
        except Exception as exc:  # noqa: BLE001 - one failing line must not hide the others
            yield orjson.dumps({"bench": "reindex_tantivy_shaped", "source": source, "error": str(exc)[-800:]}).decode()


if __name__ == "__main__":
    for line in main_lines(tuple(sys.argv[1:]) or ("sqlite", "postgres")):
        print(line, flush=True)
