"""Per-document CPU of the Python path, by step: the builder, the canonical encoding, the hash and
the Tantivy conversion (measure each change with a profile before and after).

Why a script of its own: end to end, on 2 cores, Tantivy's indexing and the source's fetch hide a
few microseconds a document in the noise between runs; timed alone, in one process, on the same
pages, a change to one step shows. Each step is timed on its own output of the step before, as
process CPU time, over *rows* documents a page, and the best of *repeats* pages is kept (the
first pages pay the imports and the caches).

    python -m bench.perdoc PIPELINE.yaml [--rows 2000] [--repeats 7]

Run it from the pipeline's directory (a relative SQLite URL is read from there). It prints one
JSON line of microseconds per document.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from sparkindex.config import load_pipeline
from sparkindex.documents import DocumentBuilder, infer_mapping, resolve_index
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json


def _cpu(step: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    started = time.process_time()
    out = step(*args)
    return time.process_time() - started, out


def _each(step: Callable[[Any], Any], values: list[Any]) -> list[Any]:
    return [step(v) for v in values]


def per_document_us(pipeline_path: Path, rows: int = 2000, repeats: int = 7) -> dict[str, float]:
    pipeline = load_pipeline(pipeline_path)
    with open_source_url(pipeline.source_url()) as source:
        plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
        builder = DocumentBuilder(source, plan)
        _, schema_plan = build_schema(infer_mapping(plan, "indexes[0]"))
        best = {"builder": float("inf"), "encoding": float("inf"), "hash": float("inf"), "conversion": float("inf")}
        after: tuple[Any, ...] | None = None
        for _ in range(repeats):
            # the builder: fetch, assemble, encode and hash (the last two are timed alone below)
            seconds, page = _cpu(builder.page, KeyRange(None, None), after, rows)
            docs = page.docs
            if len(docs) < rows:
                raise SystemExit(f"{pipeline_path}: {len(docs)} documents left a page; {rows} needed")
            after = page.last_key
            timings = {"builder": seconds}
            fields = [d.fields for d in docs]
            if any(f is None for f in fields):
                raise SystemExit(f"{pipeline_path}: the database assembles these documents; set `build: python`")
            timings["encoding"], canonical = _cpu(_each, dumps_document, fields)
            timings["hash"], _ = _cpu(_each, content_hash, canonical)
            items = [d.bulk_item() for d in docs]
            timings["conversion"], _ = _cpu(_each, partial(to_tantivy_json, plan=schema_plan), items)
            best = {k: min(v, timings[k]) for k, v in best.items()}
    return {k: round(v / rows * 1e6, 1) for k, v in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline", type=Path)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    figures = per_document_us(args.pipeline, args.rows, args.repeats)
    print(orjson.dumps({"bench": "per_document_us", "rows": args.rows, **figures}).decode())


if __name__ == "__main__":
    main()
