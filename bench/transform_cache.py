"""The "transform_cache" benchmark: where an ``on_change`` transform's stored outputs are read from.

Why: a transform with ``on_change`` (an embedding) runs only for documents whose inputs changed;
every other document of a page gets the value the transform produced last time. That value can
come from the coordination store's transform cache (``store.transform_cache.lookup``, keyed by
alias and id, with the input hash beside the diff: the design in use) or be read back from the
index the document was last written to (``documents_by_id`` with the ``on_change`` fields, to
see whether the inputs changed, and the transform's output). This line measures both ways for
one page of ids at a time, as a page of a reindex, a sync batch or a verify range asks:

- ``store_postgres`` / ``store_sqlite``: ``lookup`` of the page's ids on a PostgreSQL store (the
  test server) and on a SQLite store (a file), each diff decoded (``orjson.loads``), so that
  both ways end with the value in hand;
- ``index_tantivy`` / ``index_osmem``: ``documents_by_id(index, ids, fields=[name, description,
  embedding])`` on a Tantivy target and on osmem-server (an in-memory OpenSearch TEST DOUBLE,
  behind the real ``opensearch://`` target; skipped with a note when its binary cannot run).

The documents are shop products (``id``, ``name``, ``description``, ``price``) with an 8-float
``embedding``, ``BENCH_TRANSFORM_CACHE_DOCS`` of them (default 20,000), read in pages of
``BENCH_TRANSFORM_CACHE_PAGE`` ids (default 1,000) in key order, every page once per round, for
``BENCH_TRANSFORM_CACHE_ROUNDS`` rounds (default 5) with the sides alternated inside each round.
Each side reports µs per document of its best round (``us_per_doc``) and its median round; the
ratios are each index side's best over each store side's best, in the same run (above 1: the
store cache is faster). ``put_us_per_doc`` is what filling each side cost once (the cache's
upserts, the index's bulk), for scale: the cache pays its write for each document the transform
computed, the index read pays nothing extra on write. Every side's first page is checked to
return every id with its embedding.

    BENCH=transform_cache .venv/bin/python -m bench.run
    BENCH=transform_cache BENCH_TRANSFORM_CACHE_DOCS=5000 .venv/bin/python -m bench.run
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sparkindex.config.indexes import TransformConfig
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.transform import DocumentTransform, make_diff
from sparkindex.keys import sort_key
from sparkindex.resources import open_store_url, open_target_url
from sparkindex.targets.base import BulkItem
from sparkindex.targets.target import Target

PG = os.environ.get("SPARKINDEX_TEST_PG_URL", "postgresql://sparkindex@127.0.0.1:55432/sparkindex")
ALIAS = "bench_products"
ON_CHANGE = ("name", "description")
OUTPUT = "embedding"
DIMENSIONS = 8
MAPPING: dict[str, Any] = {
    "properties": {
        "id": {"type": "long"},
        "name": {"type": "text"},
        "description": {"type": "text"},
        "price": {"type": "double"},
        OUTPUT: {"type": "float"},
    }
}
#: documents per bulk request when filling an index
BULK = 1000
OSMEM_STARTUP_S = 30.0

#: reads one page of ids and returns ``{id: embedding}``
Reader = Callable[[Sequence[str]], dict[str, list[float]]]


def sizes() -> tuple[int, int, int]:
    """(documents, page, rounds) from the environment."""
    docs = int(os.environ.get("BENCH_TRANSFORM_CACHE_DOCS", "20000"))
    page = int(os.environ.get("BENCH_TRANSFORM_CACHE_PAGE", "1000"))
    rounds = int(os.environ.get("BENCH_TRANSFORM_CACHE_ROUNDS", "5"))
    return docs, page, rounds


def documents(n: int) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(id, built document, transformed document)`` of *n* shop products, the transform adding
    an 8-float embedding (deterministic, rounded as an embedding service's JSON is)."""
    out = []
    for i in range(1, n + 1):
        built = {
            "id": i,
            "name": f"lamp {i}",
            "description": f"a warm light for room {i % 97}, {i % 13} watts",
            "price": round(1.5 * i, 2),
        }
        embedding = [round(((i * 7919 + d * 104729) % 20001) / 10000.0 - 1.0, 6) for d in range(DIMENSIONS)]
        out.append((str(i), built, {**built, OUTPUT: embedding}))
    return out


# -- the store side -------------------------------------------------------------------------------


def fill_store(store: CoordinationStore, docs: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]) -> float:
    """Each document's cache entry, as the transform writes it (input hash, diff); seconds taken."""
    hasher = DocumentTransform(TransformConfig(function=f"{__name__}:embed", on_change=list(ON_CHANGE)), ALIAS)
    entries = [(doc_id, hasher.input_hash(built), make_diff(built, after)) for doc_id, built, after in docs]
    t0 = time.perf_counter()
    for i in range(0, len(entries), BULK):  # as pages of a run put them
        store.transform_cache.put(ALIAS, entries[i : i + BULK])
    return time.perf_counter() - t0


def store_reader(store: CoordinationStore) -> Reader:
    def read(ids: Sequence[str]) -> dict[str, list[float]]:
        found = store.transform_cache.lookup(ALIAS, ids)
        return {doc_id: orjson.loads(diff)["set"][OUTPUT] for doc_id, (_, diff) in found.items()}

    return read


@contextlib.contextmanager
def postgres_store() -> Iterator[CoordinationStore]:
    """A store on the PostgreSQL test server, under a table prefix of its own, dropped after."""
    from sparkindex.coordination.engine import make_engine
    from sparkindex.coordination.tables import make_tables

    prefix = f"bench_tc_{uuid.uuid4().hex[:8]}_"
    store = open_store_url(PG, prefix)
    try:
        yield store
    finally:
        store.close()
        engine = make_engine(PG)
        make_tables(prefix).metadata.drop_all(engine)
        engine.dispose()


# -- the index side -------------------------------------------------------------------------------


def fill_index(target: Target, docs: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]) -> tuple[str, float]:
    """A version holding every transformed document, sealed for search; (its name, seconds)."""
    index = target.create_version(ALIAS, MAPPING)
    t0 = time.perf_counter()
    for i in range(0, len(docs), BULK):
        items = []
        for doc_id, built, after in docs[i : i + BULK]:
            source = dumps_document(after)
            items.append(BulkItem(doc_id, source, content_hash(source), sort_key=sort_key([built["id"]]), fields=after))
        failed = [r for r in target.bulk(index, items) if not r.ok]
        if failed:
            raise RuntimeError(f"{len(failed)} documents not indexed, the first: {failed[0]}")
    target.finish_version(index)
    return index, time.perf_counter() - t0


def index_reader(target: Target, index: str) -> Reader:
    fields = [*ON_CHANGE, OUTPUT]

    def read(ids: Sequence[str]) -> dict[str, list[float]]:
        return {d.id: d.source[OUTPUT] for d in target.documents_by_id(index, ids, fields=fields)}

    return read


@dataclass
class Osmem:
    """An osmem-server process of our own, reached over plain HTTP."""

    host_port: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


def start_osmem() -> Osmem | str:
    """osmem-server on a free port, or why it cannot run here (the line then notes it)."""
    try:
        from osmem_server import resolve_binary

        binary = resolve_binary()
    except Exception as exc:  # noqa: BLE001 - not installed, or no binary for this platform
        return f"osmem-server cannot run here: {exc}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    args = [binary, "-addr", f"127.0.0.1:{port}", "-no-stdin-watch", "-parent-pid", str(os.getpid())]
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    except OSError as exc:
        return f"osmem-server cannot run here ({binary}): {exc}"
    ready: dict[str, Any] = {}

    def wait_ready() -> None:  # it prints one JSON line with its URL once it listens
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(orjson.JSONDecodeError):
                msg = orjson.loads(line)
                if isinstance(msg, dict) and "url" in msg:
                    ready.update(msg)
                    return

    waiter = threading.Thread(target=wait_ready, daemon=True)
    waiter.start()
    waiter.join(OSMEM_STARTUP_S)
    if not ready:
        proc.kill()
        proc.wait(timeout=10)
        return f"osmem-server did not report ready within {OSMEM_STARTUP_S:.0f}s (exit code {proc.poll()})"
    return Osmem(str(ready["url"]).removeprefix("http://"), proc)


# -- measuring ------------------------------------------------------------------------------------


def check(name: str, read: Reader, docs: Sequence[tuple[str, dict[str, Any], dict[str, Any]]], page: int) -> None:
    """The first page comes back whole, with the embeddings written."""
    first = docs[:page]
    got = read([doc_id for doc_id, _, _ in first])
    wrong = [doc_id for doc_id, _, after in first if got.get(doc_id) != after[OUTPUT]]
    if wrong or len(got) != len(first):
        raise RuntimeError(f"{name}: {len(got)} of {len(first)} ids read back, {len(wrong)} wrong (first: {wrong[:3]})")


def one_round(read: Reader, pages: Sequence[Sequence[str]]) -> float:
    """Seconds to read every page once."""
    t0 = time.perf_counter()
    for ids in pages:
        read(ids)
    return time.perf_counter() - t0


def bench_transform_cache(
    docs_n: int | None = None, page: int | None = None, rounds: int | None = None
) -> dict[str, Any]:
    """The ``transform_cache`` line."""
    default_docs, default_page, default_rounds = sizes()
    docs_n = default_docs if docs_n is None else docs_n
    page = default_page if page is None else page
    rounds = default_rounds if rounds is None else rounds
    t_start = time.perf_counter()
    docs = documents(docs_n)
    ids = [doc_id for doc_id, _, _ in docs]
    pages = [ids[i : i + page] for i in range(0, len(ids), page)]
    work = Path(tempfile.mkdtemp(prefix="sparkindex-bench-transform-cache-"))
    readers: dict[str, Reader] = {}
    put_s: dict[str, float] = {}
    notes: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        pg = stack.enter_context(postgres_store())
        put_s["store_postgres"] = fill_store(pg, docs)
        readers["store_postgres"] = store_reader(pg)
        lite = stack.enter_context(open_store_url(f"sqlite:///{work / 'state.db'}"))
        put_s["store_sqlite"] = fill_store(lite, docs)
        readers["store_sqlite"] = store_reader(lite)

        tantivy = stack.enter_context(open_target_url("tantivy://index", work, {}))
        index, put_s["index_tantivy"] = fill_index(tantivy, docs)
        readers["index_tantivy"] = index_reader(tantivy, index)

        osmem = start_osmem()
        if isinstance(osmem, str):
            notes["index_osmem"] = osmem
        else:
            stack.callback(osmem.stop)
            engine = stack.enter_context(
                open_target_url(f"opensearch://{osmem.host_port}", work, {"request_timeout_s": 60})
            )
            index, put_s["index_osmem"] = fill_index(engine, docs)
            readers["index_osmem"] = index_reader(engine, index)

        for name, read in readers.items():
            check(name, read, docs, page)
        times: dict[str, list[float]] = {name: [] for name in readers}
        for r in range(rounds):
            order = list(readers) if r % 2 == 0 else list(reversed(readers))  # alternated: no side always first
            for name in order:
                times[name].append(one_round(readers[name], pages))

    def us(seconds: float) -> float:
        return round(seconds / docs_n * 1e6, 2)

    best = {name: us(min(runs)) for name, runs in times.items()}
    ratios = {
        f"{index_side.removeprefix('index_')}/{store_side.removeprefix('store_')}": round(
            best[index_side] / best[store_side], 2
        )
        for index_side in best
        if index_side.startswith("index_")
        for store_side in best
        if store_side.startswith("store_")
    }
    line: dict[str, Any] = {
        "bench": "transform_cache",
        "docs": docs_n,
        "page": page,
        "rounds": rounds,
        "embedding_floats": DIMENSIONS,
        "us_per_doc": best,
        "us_per_doc_median": {name: us(statistics.median(runs)) for name, runs in times.items()},
        # each index side's best over each store side's best: above 1, the store cache is faster
        "ratio_index_over_store": ratios,
        "put_us_per_doc": {name: us(seconds) for name, seconds in put_s.items()},
        "cores": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    if notes:
        line["skipped"] = notes
    return line


def embed(doc: dict[str, Any]) -> dict[str, Any]:
    """The transform the cache entries are keyed by (its identity is in the input hash); never
    called: the documents come with their embedding already."""
    raise NotImplementedError


def main_lines() -> Iterator[str]:
    try:
        yield orjson.dumps(bench_transform_cache()).decode()
    except Exception as exc:  # noqa: BLE001 - the line says what failed
        yield orjson.dumps({"bench": "transform_cache", "error": f"{type(exc).__name__}: {exc}"[-800:]}).decode()


if __name__ == "__main__":
    for line in main_lines():
        print(line, flush=True)
