"""The job side of the writer: bulk-write, then move each partition's cursor, exactly once.

A partition's cursor moves only after the documents before it are acknowledged, so a crash
loses at most the unacknowledged tail, which the next claim re-reads. Every store update carries
the claim token; if another attempt took the partition over, this one stops touching it.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import orjson

from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockLost, TransientError
from sparkindex.retry import Backoff
from sparkindex.spark.bulk import bulk_with_retries
from sparkindex.spark.rows import Kind
from sparkindex.targets.base import BulkDocument, Target

log = logging.getLogger(__name__)


@dataclass
class _Claim:
    pid: str
    token: int
    entity: str
    cursor: list[Any] | None = None
    success: int = 0
    failed: int = 0
    dead: list[tuple[str, str, str]] = field(default_factory=list)
    lost: bool = False


@dataclass
class SinkSettings:
    batch_size: int
    batch_bytes: int
    retries: int
    partition_retries: int
    backoff_initial_s: float
    backoff_max_s: float


class PartitionSink:
    def __init__(
        self, store: CoordinationStore, target: Target, job_id: str, indexes: dict[str, str], settings: SinkSettings
    ) -> None:
        self.store = store
        self.target = target
        self.job_id = job_id
        self.indexes = indexes  # alias -> physical index being built
        self.s = settings
        self.claims: dict[str, _Claim] = {}
        self.buffer: list[tuple[_Claim, BulkDocument]] = []
        self.bytes = 0
        self.written = 0
        self.identity = f"{socket.gethostname()}:{os.getpid()}"

    def _claim(self, pid: str, token: int, entity: str) -> _Claim:
        c = self.claims.get(pid)
        if c is None or c.token != token:
            c = _Claim(pid, token, entity)
            self.claims[pid] = c
        return c

    def accept(self, row: dict[str, Any]) -> None:
        c = self._claim(row["pid"], row["token"], row["entity"])
        if c.lost:
            return
        kind = Kind(row["kind"])
        if kind == Kind.DOC:
            doc = BulkDocument(row["doc_id"], row["source"], row["hash"])
            self.buffer.append((c, doc))
            self.bytes += len(doc.source)
        elif kind == Kind.DOC_FAILED:
            c.failed += 1
            cls, _, msg = (row["error"] or "DocumentError: ").partition(": ")
            c.dead.append((row["doc_id"], cls, msg))
        elif kind == Kind.PAGE_END:
            c.cursor = orjson.loads(row["cursor"])
            if len(self.buffer) >= self.s.batch_size or self.bytes >= self.s.batch_bytes:
                self.flush()
        else:
            self.flush()
            self._finish(c, kind, row.get("error"))

    def _finish(self, c: _Claim, kind: Kind, error: str | None) -> None:
        if c.lost:
            return
        try:
            if kind == Kind.PARTITION_END:
                self.store.complete(c.pid, c.token)
            elif kind == Kind.RELEASED:
                self.store.release(c.pid, c.token)
            else:
                self.store.fail(c.pid, c.token, error or "source read failed", self.s.partition_retries)
        except LockLost as exc:
            log.warning("%s", exc)
        c.lost = True  # done with this claim either way

    def flush(self) -> None:
        """Write the buffer, then record each partition's acknowledged cursor and counts."""
        buffer, self.buffer, self.bytes = self.buffer, [], 0
        by_claim: dict[str, list[BulkDocument]] = {}
        for c, doc in buffer:
            by_claim.setdefault(c.pid, []).append(doc)
        for pid, c in list(self.claims.items()):
            docs = by_claim.get(pid, [])
            if c.lost or (not docs and c.cursor is None and not c.dead):
                continue
            index = self.indexes[c.entity]
            try:
                if docs:
                    outcome = bulk_with_retries(
                        self.target,
                        index,
                        docs,
                        self.s.retries,
                        Backoff(self.s.backoff_initial_s, self.s.backoff_max_s),
                        # Claim token 1 is the partition's first claim ever: nothing of it was written.
                        assume_new=c.token == 1,
                    )
                    c.success += outcome.success
                    c.failed += len(outcome.failures)
                    c.dead.extend(outcome.failures)
                    self.written += outcome.success
            except TransientError as exc:
                # The target stayed down beyond our retries: give the partition back for a later pass.
                log.error("partition %s: %s", pid, exc)
                self._finish(c, Kind.FAILED, f"target: {exc}")
                continue
            try:
                if c.dead:
                    self.store.dead_letters.add(self.job_id, c.entity, pid, c.dead)
                self.store.save_progress(pid, c.token, c.cursor, c.success, c.failed, self.identity)
            except LockLost as exc:
                log.warning("%s; leaving it to its new owner", exc)
                c.lost = True
            c.success = c.failed = 0
            c.dead = []
            c.cursor = None

    def close(self) -> None:
        self.flush()
