"""The hand-written single-process baseline every reindex benchmark is a ratio against.

Why: the pipeline is judged against what a competent engineer writes in an afternoon: keyset
pages over the root table, children fetched per page with ``IN`` lists, orjson, one Tantivy writer
with two indexing threads. To be a fair baseline it must build the *same* documents and the same
index as the pipeline, so it reuses the pipeline's own builder and Tantivy conversion rather than
hand-rolling JSON; only the orchestration (Spark, coordination, partitions, resume) is left out.
It works on any pipeline file (the shop, the large documents; SQLite or PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from sparkindex.config import load_pipeline
from sparkindex.documents import DocumentBuilder, infer_mapping, resolve_index
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json

PAGE = 1000


def tantivy_converter(sp: Any) -> Callable[[Any], str]:
    """The pipeline's own document -> Tantivy JSON conversion, fed the write the pipeline makes
    of each document (its bulk item: fields, ``_key``, version), so both sides pay the same cost."""

    def convert(d: Any) -> str:
        return to_tantivy_json(d.bulk_item(), sp).decode()

    return convert


@dataclass(frozen=True)
class NaiveResult:
    docs: int
    seconds: float
    cpu_cores: float  # process CPU time / wall: Tantivy's writer threads count too
    avg_doc_bytes: float  # mean canonical JSON size: what "large documents" means, measured

    @property
    def docs_per_s(self) -> float:
        return self.docs / self.seconds if self.seconds else 0.0


def naive_loop(pipeline_path: Path, out_dir: Path, writer_threads: int = 2) -> NaiveResult:
    """keyset read -> build -> one Tantivy writer, in one process, for the pipeline's first index.

    Tantivy's writer indexes on its own threads, so this "single process" already keeps about
    1.5 of 2 cores busy: that, not the pipeline, bounds the achievable ratio on this machine.
    The clock starts after the source is opened and the plan resolved, as a script would do
    before its loop; the pipeline's figure, by contrast, includes Spark's start-up.
    """
    pipeline = load_pipeline(pipeline_path)
    with open_source_url(pipeline.source_url()) as source:
        plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
        builder = DocumentBuilder(source, plan)
        schema, sp = build_schema(infer_mapping(plan, "indexes[0]"))
        out_dir.mkdir(parents=True)
        index = tantivy.Index(schema, path=str(out_dir))
        writer = index.writer(256 * 1024 * 1024, writer_threads)
        convert = tantivy_converter(sp)
        started, cpu0 = time.perf_counter(), time.process_time()
        after: tuple[object, ...] | None = None
        n, size = 0, 0
        while True:
            page = builder.page(KeyRange(None, None), after, PAGE)
            for d in page.docs:
                writer.add_json(convert(d))
                size += len(d.source)
            n += len(page.docs)
            if page.rows < PAGE:
                break
            after = page.last_key
        writer.commit()
        writer.wait_merging_threads()
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu0
    return NaiveResult(n, wall, cpu / wall if wall else 0.0, size / n if n else 0.0)
