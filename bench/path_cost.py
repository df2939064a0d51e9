"""Per-document CPU of the package's Python path against the independent loop's, step by step.

Why: end to end, the pipeline and bench/independent.py differ in more than their Python (Spark,
Tantivy's merges, the garbage collector's settings), so their ratio cannot say whether the
package's builder and conversion cost what a hand-written loop's do. This runs both
paths in one process, on the same wide pages, each feeding a one-thread Tantivy writer, and
times every step by the calling thread's CPU clock (Tantivy's own threads are not counted).
Both run under the workers' collector setting (:func:`sparkindex.worker.collector.tune_collector`)
unless ``--default-gc`` is given, so the difference is the code's and not the collector's.

    python -m bench.path_cost WIDE_DIR [--pages 40] [--repeats 2] [--default-gc]

*WIDE_DIR* holds ``wide.db`` and ``pipeline.yaml`` from :func:`bench.wide.generate_wide_sqlite` and
:func:`bench.wide.write_wide_pipeline`. Prints one JSON line per path and repeat, in µs a document.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from bench.independent import HEAP, PAGE, WideDb, encode, hand_schema, pages
from sparkindex.config import load_pipeline
from sparkindex.documents import DocumentBuilder, infer_mapping, resolve_index
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json

Steps = dict[str, float]


@dataclass(frozen=True)
class PathCost:
    """One path's documents and its CPU per document, by step, in µs."""

    docs: int
    us: dict[str, float]

    @property
    def total_us(self) -> float:
        return round(sum(self.us.values()), 1)


def _per_doc(steps: Steps, docs: int) -> PathCost:
    return PathCost(docs, {k: round(v / docs * 1e6, 1) for k, v in steps.items()} if docs else {})


def _timed(steps: Steps, name: str, step: Callable[[], Any]) -> Any:
    started = time.thread_time()
    out = step()
    steps[name] = steps.get(name, 0.0) + time.thread_time() - started
    return out


def _writer(schema: tantivy.Schema) -> tuple[Any, str]:
    directory = tempfile.mkdtemp(prefix="sparkindex-path-cost-")
    return tantivy.Index(schema, path=directory).writer(HEAP, 1), directory


def independent_path(url: str, n_pages: int) -> PathCost:
    """The independent loop's steps: fetch and dicts, its two encodings (with hash and base64), add."""
    db = WideDb(url)
    writer, directory = _writer(hand_schema())
    steps: Steps = {}
    docs_seen = 0
    it: Iterator[list[dict[str, Any]]] = pages(db)
    try:
        for _ in range(n_pages):
            docs = _timed(steps, "fetch_and_dicts", lambda: next(it, None))
            if docs is None:
                break
            bodies = _timed(steps, "encodings", lambda d=docs: [encode(doc)[2] for doc in d])
            _timed(steps, "decode_and_add_json", lambda b=bodies: [writer.add_json(x.decode()) for x in b])
            docs_seen += len(docs)
    finally:
        writer.rollback()
        db.close()
        shutil.rmtree(directory, ignore_errors=True)
    return _per_doc(steps, docs_seen)


def package_path(pipeline_path: Path, n_pages: int) -> PathCost:
    """The pipeline's steps in a worker: the builder's page, bulk items, conversion, add."""
    pipeline = load_pipeline(pipeline_path)
    with open_source_url(pipeline.source_url()) as source:
        plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
        builder = DocumentBuilder(source, plan)
        schema, schema_plan = build_schema(infer_mapping(plan, "indexes[0]"))
        writer, directory = _writer(schema)
        steps: Steps = {}
        docs_seen = 0
        after: tuple[Any, ...] | None = None
        try:
            for _ in range(n_pages):
                page = _timed(steps, "builder_page", lambda a=after: builder.page(KeyRange(None, None), a, PAGE))
                after = page.last_key
                items = _timed(steps, "bulk_items", lambda p=page: [d.bulk_item() for d in p.docs])
                convert = lambda i=items: [str(to_tantivy_json(x, schema_plan), "utf-8") for x in i]  # noqa: E731
                bodies = _timed(steps, "conversion_and_decode", convert)
                _timed(steps, "add_json", lambda b=bodies: [writer.add_json(x) for x in b])
                docs_seen += len(page.docs)
                if page.rows < PAGE:
                    break
        finally:
            writer.rollback()
            shutil.rmtree(directory, ignore_errors=True)
    return _per_doc(steps, docs_seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wide_dir", type=Path)
    parser.add_argument("--pages", type=int, default=40, help=f"{PAGE:,}-root pages per path and repeat")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--default-gc", action="store_true", help="leave Python's collector as it is")
    args = parser.parse_args()
    os.chdir(args.wide_dir)  # the pipeline's relative SQLite URL is read from there
    if not args.default_gc:
        from sparkindex.worker.collector import tune_collector

        tune_collector()
    for repeat in range(args.repeats):
        for name, run in (
            ("independent", lambda: independent_path(f"sqlite:///{Path('wide.db').resolve()}", args.pages)),
            ("package", lambda: package_path(Path("pipeline.yaml"), args.pages)),
        ):
            cost = run()
            line = {"path": name, "repeat": repeat + 1, "docs": cost.docs, "total_us": cost.total_us, **cost.us}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
