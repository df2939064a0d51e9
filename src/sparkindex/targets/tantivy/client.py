"""Tantivy as a search target, safe for many writer processes on one index.

Tantivy allows one ``IndexWriter`` per directory. Spark runs several tasks (each in its own Python
worker) against one index version, so every bulk takes an exclusive file lock, opens a writer,
deletes-then-adds each document by ``_id`` (an upsert: a retried batch never duplicates), commits
and releases. Opening a writer costs about 3 ms and a commit about 40 ms, so with bulks of
thousands of documents the lock is held a small fraction of the time while reading and building
documents, the expensive part, runs in parallel.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import tantivy

from sparkindex.errors import DocumentError, PermanentError, TransientError
from sparkindex.targets.base import (
    BulkDocument,
    BulkItemResult,
    SearchHit,
    Target,
    version_name,
    version_number,
)
from sparkindex.targets.tantivy.catalogue import AliasCatalogue
from sparkindex.targets.tantivy.config import TantivyTargetConfig
from sparkindex.targets.tantivy.schema import SchemaPlan, build_schema, to_tantivy_json

log = logging.getLogger(__name__)

MAPPING_FILE = "sparkindex-mapping.json"
STATE_FILE = "sparkindex-state.json"


class TantivyTarget(Target):
    def __init__(self, config: TantivyTargetConfig) -> None:
        self.config = config
        self.root = config.root
        self.catalogue = AliasCatalogue(self.root)
        self._open: dict[str, tuple[tantivy.Index, SchemaPlan]] = {}

    # -- versions ----------------------------------------------------------------------------------
    def _dir(self, index: str) -> Path:
        return self.root / index

    def create_version(self, alias: str, mapping: dict[str, Any]) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        existing = [version_number(alias, v) or 0 for v in self.list_versions(alias)]
        n = max(existing, default=0) + 1
        index = version_name(alias, n)
        path = self._dir(index)
        path.mkdir(parents=True, exist_ok=False)
        schema, _ = build_schema(mapping)
        tantivy.Index(schema, path=str(path), reuse=False)
        (path / MAPPING_FILE).write_bytes(orjson.dumps(mapping, option=orjson.OPT_INDENT_2))
        self._write_state(index, {"state": "building", "created_at": time.time()})
        return index

    def _write_state(self, index: str, state: dict[str, Any]) -> None:
        (self._dir(index) / STATE_FILE).write_bytes(orjson.dumps(state))

    def version_exists(self, index: str) -> bool:
        return (self._dir(index) / MAPPING_FILE).exists()

    def list_versions(self, alias: str) -> list[str]:
        if not self.root.exists():
            return []
        found = [
            (n, p.name)
            for p in self.root.iterdir()
            if p.is_dir() and (n := version_number(alias, p.name)) is not None and (p / MAPPING_FILE).exists()
        ]
        return [name for _, name in sorted(found)]

    def delete_version(self, index: str) -> None:
        for alias, entry in self.catalogue.read().items():
            if entry["index"] == index:
                raise PermanentError(f"index {index!r} is behind alias {alias!r}; swap the alias first")
        self._open.pop(index, None)
        shutil.rmtree(self._dir(index), ignore_errors=False)

    def _index(self, index: str) -> tuple[tantivy.Index, SchemaPlan]:
        cached = self._open.get(index)
        if cached is None:
            path = self._dir(index)
            try:
                mapping = orjson.loads((path / MAPPING_FILE).read_bytes())
            except FileNotFoundError:
                raise PermanentError(f"tantivy index {index!r} does not exist under {self.root}") from None
            schema, plan = build_schema(mapping)
            cached = (tantivy.Index(schema, path=str(path), reuse=True), plan)
            self._open[index] = cached
        return cached

    def _resolve(self, name: str) -> str:
        return self.catalogue.get(name) or name

    # -- writes ------------------------------------------------------------------------------------
    @contextmanager
    def _writer(self, index: str) -> Iterator[Any]:
        idx, _ = self._index(index)
        lock_path = self._dir(index) / ".sparkindex-writer.lock"
        deadline = time.monotonic() + self.config.lock_timeout_s
        with open(lock_path, "a+b") as fh:
            pause = 0.002
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TransientError(f"tantivy index {index!r}: writer lock busy") from None
                    time.sleep(pause)  # another process is committing; poll with growing pauses
                    pause = min(pause * 2, 0.05)
            try:
                try:
                    writer = idx.writer(self.config.writer_heap_mb * 1024 * 1024, self.config.writer_threads)
                except ValueError as exc:
                    raise TransientError(f"tantivy index {index!r}: cannot open writer: {exc}") from exc
                try:
                    yield writer
                finally:
                    # Drops the IndexWriter (and Tantivy's own directory lock) before our file lock
                    # is released; `del` would not, as the caller's `with ... as writer` still refers to it.
                    writer.wait_merging_threads()
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def bulk(self, index: str, docs: Sequence[BulkDocument], assume_new: bool = False) -> list[BulkItemResult]:
        _, plan = self._index(index)
        results: list[BulkItemResult] = []
        with self._writer(index) as writer:
            for doc in docs:
                try:
                    body = to_tantivy_json(doc.id, doc.source, doc.hash, plan)
                    if not assume_new:  # deletes cost at every commit; a first write needs none
                        writer.delete_documents_by_term("_id", doc.id)
                    writer.add_json(body)
                except DocumentError as exc:
                    results.append(BulkItemResult(doc.id, False, exc.reason, exc.error_class))
                except ValueError as exc:
                    # Tantivy's type checks: the document does not fit the mapping. Permanent.
                    results.append(BulkItemResult(doc.id, False, str(exc), "MappingRejected"))
                else:
                    results.append(BulkItemResult(doc.id, True))
            try:
                writer.commit()
            except (ValueError, OSError) as exc:
                raise TransientError(f"tantivy index {index!r}: commit failed: {exc}") from exc
        return results

    def finish_version(self, index: str) -> None:
        with self._writer(index) as writer:
            writer.commit()
            writer.garbage_collect_files()
        self._write_state(index, {"state": "ready", "finished_at": time.time()})

    def swap_alias(self, alias: str, index: str, fence: int) -> str | None:
        if not self.version_exists(index):
            raise PermanentError(f"cannot point alias {alias!r} at missing index {index!r}")
        return self.catalogue.swap(alias, index, fence)

    def alias_target(self, alias: str) -> str | None:
        return self.catalogue.get(alias)

    # -- reads -------------------------------------------------------------------------------------
    def _searcher(self, name: str) -> tuple[tantivy.Index, SchemaPlan, Any]:
        idx, plan = self._index(self._resolve(name))
        idx.reload()
        return idx, plan, idx.searcher()

    def count(self, name: str) -> int:
        _, _, searcher = self._searcher(name)
        return int(searcher.num_docs)

    def scan_hashes(self, name: str) -> Iterator[tuple[str, str]]:
        _, _, searcher = self._searcher(name)
        total = searcher.num_docs
        if total == 0:
            return
        hits = searcher.search(tantivy.Query.all_query(), total, count=False).hits
        for _, addr in hits:
            doc = searcher.doc(addr)
            yield doc["_id"][0], doc["_hash"][0]

    def search(self, name: str, query: str, limit: int = 10) -> list[SearchHit]:
        idx, plan, searcher = self._searcher(name)
        fields = plan.text_fields or ["_id"]
        try:
            parsed = idx.parse_query(query, fields) if query.strip() else tantivy.Query.all_query()
        except ValueError as exc:
            from sparkindex.errors import UsageError

            raise UsageError(f"cannot parse query {query!r}: {exc}") from None
        out = []
        for score, addr in searcher.search(parsed, limit).hits:
            doc = searcher.doc(addr)
            out.append(SearchHit(doc["_id"][0], float(score), orjson.loads(doc["_source"][0])))
        return out

    def close(self) -> None:
        self._open.clear()
