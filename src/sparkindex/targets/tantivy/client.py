"""Tantivy as a search target, written by many Spark tasks at once.

Tantivy allows one ``IndexWriter`` per directory. While a new version is built, each partition
attempt writes a stage of its own, in its own process, and the finish adopts the completed
ones (:mod:`.stages`); every other write (change capture, repair, the DataFrame writer) goes
through the version's writer service (:mod:`.service`): tasks convert their documents to
Tantivy JSON in their own process (in parallel), and the service applies them as upserts and
group-commits. Reads (count,
scans, search) open the directory directly; they never need the writer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import tantivy

from sparkindex.checksums import KeyCheck, RangeChecksum
from sparkindex.errors import DocumentError, PermanentError
from sparkindex.files import write_atomically
from sparkindex.targets.base import (
    BulkItem,
    BulkItemResult,
    KeyBounds,
    SearchHit,
    StoredDocument,
    WriteMark,
    version_name,
    version_number,
)
from sparkindex.targets.tantivy import reader, stages
from sparkindex.targets.tantivy.catalogue import AliasCatalogue
from sparkindex.targets.tantivy.config import TantivyTargetConfig
from sparkindex.targets.tantivy.errors import disk_errors_are_transient
from sparkindex.targets.tantivy.schema import SchemaPlan, build_schema, to_tantivy_json, with_checks, without_marker
from sparkindex.targets.tantivy.stages import TantivyStage
from sparkindex.targets.tantivy.writer import WriterClient
from sparkindex.targets.target import Target

log = logging.getLogger(__name__)

MAPPING_FILE = "sparkindex-mapping.json"
STATE_FILE = "sparkindex-state.json"
#: a half-made version directory idle this long belongs to a creation that will not finish
CREATION_ABANDONED_S = 3600.0


class TantivyTarget(Target):
    lists_key_checks = True  # a terms aggregation over _key (reader.key_checks)

    def __init__(self, config: TantivyTargetConfig) -> None:
        self.config = config
        self.root = config.root
        self.catalogue = AliasCatalogue(self.root)
        self._open: dict[str, tuple[tantivy.Index, SchemaPlan]] = {}
        self._samples: dict[str, tuple[tuple[int, int], reader.KeySample]] = {}

    # -- versions ----------------------------------------------------------------------------------
    def _dir(self, index: str) -> Path:
        return self.root / index

    def create_version(
        self, alias: str, mapping: dict[str, Any], settings: dict[str, Any] | None = None, *, adopt: bool = False
    ) -> str:
        with disk_errors_are_transient(f"index root {self.root}: creating it"):
            self.root.mkdir(parents=True, exist_ok=True)
        existing = [version_number(alias, v) or 0 for v in self.list_versions(alias)]
        n = max(existing, default=0) + 1
        # A directory without a mapping is a version whose creation was interrupted (it is not
        # listed); it would block this number forever, so it is cleared and reused.
        index = version_name(alias, n)
        path = self._dir(index)
        if path.exists() and not (path / MAPPING_FILE).exists():
            log.warning("removing half-created index directory %s", path)
            shutil.rmtree(path)
        self._sweep_creations(index)
        # this attempt's own: a driver frozen while it created the same number must find its
        # directory gone only by its own hand, and this one's cleanup must not take the other's
        tmp = self.root / f".creating-{index}.{os.getpid()}.{time.monotonic_ns()}"
        # every new index has the check fields; the marker says so to whoever opens it later
        stored = with_checks(mapping)
        schema, _ = build_schema(stored)
        # whether the version is built in stages is fixed here, once: a job resumed with another
        # setting must not mix staged (add-only) writes with the service's upserts
        state = {"state": "building", "created_at": time.time(), "staged": self.config.staged_builds}
        try:
            with disk_errors_are_transient(f"index {index}: creating it under {self.root}"):
                tmp.mkdir(parents=True)
                tantivy.Index(schema, path=str(tmp), reuse=False)
                (tmp / MAPPING_FILE).write_bytes(orjson.dumps(stored, option=orjson.OPT_INDENT_2))
                (tmp / STATE_FILE).write_bytes(orjson.dumps(state))
                tmp.rename(path)  # appears whole or not at all
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the space goes back; the rerun starts afresh
            raise
        return index

    def _sweep_creations(self, index: str) -> None:
        """Remove what interrupted creations of *index* left: the exact name older versions used,
        and this version's attempts idle for an hour (an attempt writes for a second or two)."""
        shutil.rmtree(self.root / f".creating-{index}", ignore_errors=True)
        stale = time.time() - CREATION_ABANDONED_S
        for leftover in self.root.glob(f".creating-{index}.*"):
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < stale:
                    shutil.rmtree(leftover, ignore_errors=True)

    def _state(self, index: str) -> dict[str, Any]:
        try:
            state: dict[str, Any] = orjson.loads((self._dir(index) / STATE_FILE).read_bytes())
        except FileNotFoundError:
            raise PermanentError(f"tantivy index {index!r} does not exist under {self.root}") from None
        return state

    def _write_state(self, index: str, state: dict[str, Any]) -> None:
        # replaced whole: a state file left truncated would stop every later run of the version
        with disk_errors_are_transient(f"index {index}: writing its state"):
            write_atomically(self._dir(index) / STATE_FILE, orjson.dumps({**self._state(index), **state}))

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
        self._writer_client(index).stop_if_running()
        stages.remove_stages(self._dir(index))
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
    def _writer_client(self, index: str) -> WriterClient:
        c = self.config
        return WriterClient(self._dir(index), c.writer_heap_mb, c.writer_threads, c.service_idle_s, c.lock_timeout_s)

    def bulk(self, index: str, items: Sequence[BulkItem]) -> list[BulkItemResult]:
        return self._bulk(index, items, wait=True)[0]

    def bulk_unsynced(self, index: str, items: Sequence[BulkItem]) -> tuple[list[BulkItemResult], WriteMark | None]:
        return self._bulk(index, items, wait=False)

    def sync(self, index: str, mark: WriteMark) -> None:
        self._writer_client(index).sync(mark)

    def _bulk(self, index: str, items: Sequence[BulkItem], wait: bool) -> tuple[list[BulkItemResult], WriteMark | None]:
        _, plan = self._index(index)
        results: list[BulkItemResult | None] = [None] * len(items)
        wire: list[tuple[str, str, bytes]] = []
        positions: list[int] = []
        for i, item in enumerate(items):
            if item.op == "delete":
                wire.append((item.id, "delete", b""))
                positions.append(i)
                continue
            try:
                body = to_tantivy_json(item, plan)
            except DocumentError as exc:
                results[i] = BulkItemResult(item.id, False, exc.reason, exc.error_class)
                continue
            wire.append((item.id, "index", body))
            positions.append(i)
        mark = None
        errors: dict[str, list[str]] = {}
        if wire:
            errors, mark = self._writer_client(index).bulk(wire, wait=wait)
        for k, i in enumerate(positions):
            err = errors.get(str(k))
            if err is None:
                results[i] = BulkItemResult(items[i].id, True)
            else:
                results[i] = BulkItemResult(items[i].id, False, err[1], err[0])
        return [r for r in results if r is not None], mark

    def open_stage(self, index: str, name: str) -> TantivyStage | None:
        if not self._state(index).get("staged"):
            return None  # created to be written through the service (or by an older sparkindex)
        mapping = orjson.loads((self._dir(index) / MAPPING_FILE).read_bytes())
        return TantivyStage(self._dir(index), name, mapping, self.config.stage_heap_mb)

    def adopt_stages(self, index: str, names: Collection[str]) -> int:
        path = self._dir(index)
        if not stages.stages_dir(path).exists():
            return 0
        with (
            disk_errors_are_transient(f"index {index}: adopting its sealed stages"),
            self._writer_client(index).exclusive(),  # no Tantivy writer may be open meanwhile
        ):
            added = stages.adopt(path, names)  # done again whole by a rerun: nothing is adopted twice
            stages.remove_stages(path)  # before anyone may merge the adopted segments away
        self._open.pop(index, None)
        return added

    def finish_version(self, index: str) -> None:
        client = self._writer_client(index)
        if self._state(index).get("staged"):
            # Every acknowledged write is committed already. The adopted segments (about one per
            # partition) are searchable as they are; Tantivy's merge policy takes them on the
            # version's next commit (a sync), so a rebuild ends without a merge tail.
            client.stop_if_running()
        else:
            client.finish()  # commit, merge and collect garbage, starting a service if needed
        self._write_state(index, {"state": "ready", "finished_at": time.time()})

    def observe_fence(self, alias: str, fence: int) -> None:
        self.catalogue.observe_fence(alias, fence)

    def swap(self, alias: str, new_index: str, expected_previous: str | None, fence: int | None = None) -> None:
        if not self.version_exists(new_index):
            raise PermanentError(f"cannot point alias {alias!r} at missing index {new_index!r}")
        self.catalogue.swap(alias, new_index, expected_previous, fence)

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

    def scan_hashes(
        self, name: str, ids: Sequence[str] | None = None, key_range: KeyBounds | None = None
    ) -> Iterator[tuple[str, str]]:
        idx, _, searcher = self._searcher(name)
        clauses = []
        if ids is not None:
            if not ids:
                return
            clauses.append(tantivy.Query.term_set_query(idx.schema, "_id", list(ids)))
        if key_range is not None:
            clauses.append(key_range_query(idx, key_range))
        if not clauses:
            query = tantivy.Query.all_query()
        elif len(clauses) == 1:
            query = clauses[0]
        else:
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in clauses])
        total = searcher.num_docs
        if total == 0:
            return
        for _, addr in searcher.search(query, total, count=False).hits:
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

    # -- reading back (spark.read, index-to-index): see reader.py -----------------------------------
    def mapping(self, name: str) -> dict[str, Any]:
        index = self._resolve(name)
        self._index(index)  # a missing index raises, naming the root
        return without_marker(orjson.loads((self._dir(index) / MAPPING_FILE).read_bytes()))

    def read_documents(
        self,
        name: str,
        key_range: KeyBounds | None = None,
        after: str | None = None,
        size: int = 1000,
        fields: Sequence[str] | None = None,
        query: str | None = None,
    ) -> list[StoredDocument]:
        if size <= 0:
            return []
        idx, plan, searcher = self._searcher(name)
        where = reader.parse_filter(idx, query, plan.text_fields)
        keys = reader.page_keys(idx, searcher, self._sample(name, idx, searcher), key_range, after, size, where)
        return reader.fetch(idx, searcher, keys, fields, where)

    def documents_by_id(
        self, name: str, ids: Sequence[str], fields: Sequence[str] | None = None
    ) -> list[StoredDocument]:
        idx, _, searcher = self._searcher(name)
        return reader.by_ids(searcher, idx.schema, ids, fields)

    def count_hash_prefix(self, name: str, prefix: str) -> int:
        idx, _, searcher = self._searcher(name)
        return reader.count_hash_prefix(searcher, idx.schema, prefix)

    def stores_checks(self, name: str) -> bool:
        return self._index(self._resolve(name))[1].checks

    def range_checksums(self, name: str, ranges: Sequence[KeyBounds]) -> list[RangeChecksum]:
        """One ``stats`` aggregation per range over the check fields. An index created before
        them is refused (Tantivy would sum a field its schema lacks as an empty one, and every
        range would look empty rather than unknown)."""
        idx, plan, searcher = self._searcher(name)
        if not plan.checks:
            raise PermanentError(
                f"tantivy index {self._resolve(name)!r} stores no range checks (it was created by an older "
                "sparkindex): compare it document by document"
            )
        return [reader.range_checksum(searcher, key_range_query(idx, bounds)) for bounds in ranges]

    def key_checks(self, name: str, key_range: KeyBounds) -> Iterator[KeyCheck]:
        idx, _, searcher = self._searcher(name)
        key_range_query(idx, key_range)  # refuses a bound that is not a sort key
        return reader.key_checks(idx, searcher, self._sample(name, idx, searcher), key_range)

    def key_splits(self, name: str, parts: int) -> list[str]:
        idx, _, searcher = self._searcher(name)
        return reader.split_points(self._sample(name, idx, searcher), parts)

    def _sample(self, name: str, idx: tantivy.Index, searcher: Any) -> reader.KeySample:
        """The key sample of *name*, drawn again once the index has changed (a stale sample only
        makes windows less even, never pages wrong)."""
        index = self._resolve(name)
        signature = (int(searcher.num_docs), int(searcher.num_segments))
        cached = self._samples.get(index)
        if cached is None or cached[0] != signature:
            cached = (signature, reader.draw_sample(idx, searcher))
            self._samples[index] = cached
        return cached[1]

    def close(self) -> None:
        self._open.clear()
        self._samples.clear()


def key_range_query(idx: tantivy.Index, key_range: KeyBounds) -> tantivy.Query:
    """Documents whose ``_key`` lies in [lo, hi). tantivy-py's range_query takes no text fields,
    but its query parser does; sort keys are hex, so a bound is always one plain token."""
    lo, hi = key_range
    for bound in (lo, hi):
        if bound is not None and not _HEX.fullmatch(bound):
            raise ValueError(f"not a sort key: {bound!r}")
    if lo is None and hi is None:
        return tantivy.Query.all_query()  # the parser's `_key:[* TO *]` matches nothing
    return idx.parse_query(f"_key:[{lo or '*'} TO {hi or '*'}" + ("}" if hi else "]"), ["_key"])


#: a sort key (hex), or a bound just above one and its extensions (verify's ranges end in "g")
_HEX = re.compile(r"[0-9a-f]+g?")
