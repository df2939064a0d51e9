"""Staged builds: each partition attempt writes its own small Tantivy index, adopted at finish.

Building a new version through the writer service cost every document a socket hop and a delete
(an upsert), all behind the one writer the directory allows; the large-document benchmark ran
at a fraction of a plain loop's speed. A version that nobody reads yet needs neither: each claim
of a partition writes, in its own process, to a stage directory of its own (add only: the
stage holds exactly that attempt's documents, so nothing can be there twice), seals it with one
commit when the partition is done, and the finish step adopts the segments of the stages whose
claims the coordination store recorded as completing their partitions. A stage of an attempt
that died, was stopped or lost its claim is never adopted: its partition was redone from the
start by a later claim (see :mod:`sparkindex.worker.partition`).

Adoption links the stages' segment files into the version and lists their segments in its
``meta.json``, replaced atomically; a segment already listed is skipped, so an adoption cut
short by a crash is simply done again. Layout, beside the version's directory::

    <root>/<index>.stages/open/<name>     being written by one attempt
    <root>/<index>.stages/sealed/<name>   committed, waiting for the finish
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import orjson
import tantivy

from sparkindex.errors import DocumentError, TransientError
from sparkindex.files import write_atomically
from sparkindex.targets.base import BulkItem, BulkItemResult
from sparkindex.targets.tantivy.errors import writer_failed
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json
from sparkindex.targets.writer import Stage

log = logging.getLogger(__name__)

META = "meta.json"
MANAGED = ".managed.json"


def stages_dir(index_dir: Path) -> Path:
    return index_dir.parent / f"{index_dir.name}.stages"


class TantivyStage(Stage):
    """One attempt's private writer: add only, one indexing thread (Spark runs the tasks side by
    side already), durable and adoptable only once sealed."""

    def __init__(self, index_dir: Path, name: str, mapping: dict[str, Any], heap_mb: int) -> None:
        self.name = name
        root = stages_dir(index_dir)
        self.path = root / "open" / name
        self.sealed_path = root / "sealed" / name
        shutil.rmtree(self.path, ignore_errors=True)  # a claim token is never reused; this is debris
        schema, self.plan = build_schema(mapping)
        try:
            self.path.mkdir(parents=True)
            (root / "sealed").mkdir(exist_ok=True)
            self.index = tantivy.Index(schema, path=str(self.path), reuse=False)
            self.writer: Any = self.index.writer(heap_mb * 1024 * 1024, 1)
        except (ValueError, OSError) as exc:  # a full disk: the partition waits for room, parked
            shutil.rmtree(self.path, ignore_errors=True)
            raise TransientError(f"tantivy stage {name}: cannot be opened under {root}: {exc}") from exc
        self.documents = 0

    def add(self, items: Sequence[BulkItem]) -> list[BulkItemResult]:
        rejected = []
        add_json, plan = self.writer.add_json, self.plan
        for item in items:
            if item.op == "delete":  # nothing of this attempt's can be there yet to delete
                continue
            try:
                add_json(str(to_tantivy_json(item, plan), "utf-8"))
            except DocumentError as exc:
                rejected.append(BulkItemResult(item.id, False, exc.reason, exc.error_class))
                continue
            except ValueError as exc:
                if writer_failed(exc):  # the writer is dead: every later document would "fail" too
                    raise TransientError(f"tantivy stage {self.path.name}: its writer failed: {exc}") from exc
                # the document does not fit the mapping: permanent
                rejected.append(BulkItemResult(item.id, False, str(exc), "MappingRejected"))
                continue
            self.documents += 1
        return rejected

    def seal(self) -> None:
        try:
            self.writer.commit()
        except (ValueError, OSError) as exc:  # a full disk, a dead writer: the stage is never sealed
            raise TransientError(f"tantivy stage {self.path.name}: its commit failed: {exc}") from exc
        self.writer.wait_merging_threads()  # consumes the writer; the stage is read-only now
        self.writer = None
        os.rename(self.path, self.sealed_path)

    def discard(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(ValueError, OSError):
                self.writer.rollback()
            self.writer = None
        shutil.rmtree(self.path, ignore_errors=True)


def adopt(index_dir: Path, names: Collection[str]) -> int:
    """Link the segments of the sealed stages *names* into *index_dir*; return how many
    documents they add. The caller holds the version's writer lock (no service runs)."""
    sealed = stages_dir(index_dir) / "sealed"
    meta = orjson.loads((index_dir / META).read_bytes())
    listed = {s["segment_id"] for s in meta["segments"]}
    managed_path = index_dir / MANAGED
    managed = set(orjson.loads(managed_path.read_bytes())) if managed_path.exists() else set()
    added, appended = 0, 0
    for name in sorted(names):
        stage = sealed / name
        if not (stage / META).exists():
            continue  # adopted and removed already, or never sealed (the count check will say)
        stage_meta = orjson.loads((stage / META).read_bytes())
        for segment in stage_meta["segments"]:
            if segment["segment_id"] in listed:
                continue
            prefix = segment["segment_id"].replace("-", "")
            for file in stage.glob(f"{prefix}.*"):
                link = index_dir / file.name
                if not link.exists():
                    os.link(file, link)
                managed.add(file.name)
            meta["segments"].append(segment)
            listed.add(segment["segment_id"])
            appended += 1
            added += int(segment["max_doc"]) - int((segment.get("deletes") or {}).get("num_deleted_docs", 0))
            meta["opstamp"] = max(int(meta["opstamp"]), int(stage_meta["opstamp"]))
    if appended:  # otherwise nothing is written: the version's meta.json stays as its writer left it
        write_atomically(managed_path, orjson.dumps(sorted(managed)))
        write_atomically(index_dir / META, orjson.dumps(meta))  # the moment the documents become the version's
    return added


def remove_stages(index_dir: Path) -> None:
    """Remove every stage of the version: renamed away first, so that a crash half-way through
    the removal leaves no partial stage that a later adoption could take."""
    root = stages_dir(index_dir)
    if not root.exists():
        return
    doomed = root.with_name(f".{root.name}.removing-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(root, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
