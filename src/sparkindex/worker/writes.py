"""How one claim's batches reach the target and are acknowledged: the strategy interface.

A partition attempt (:mod:`sparkindex.worker.partition`) reads pages and builds batches; a
:class:`PartitionWrites` takes them from there, by one of two protocols, chosen once per claim by
the target (:meth:`~sparkindex.targets.writer.TargetWriter.open_stage`):

- staged (:mod:`.staged_writes`): the attempt adds to a private stage of its own, sealed and
  acknowledged every ``sync_every_s`` and at the end; the finish adopts the stages of the claims
  that completed, so an attempt that dies leaves nothing in the index (Tantivy builds);
- bulk (:mod:`.bulk_writes`): the attempt writes straight into the index, up to ``max_in_flight``
  bulks on their way, each recorded beforehand so that a redo can undo what was never
  acknowledged (the search engines, Tantivy's writer service).

Either way a batch is first applied (written, perhaps not yet durable), then acknowledged: its
dead letters, cursor and counts recorded in the store (:meth:`PartitionWrites._record`), in
order. Only acknowledged work survives the claim; the rest is read again from the cursor.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, final

from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.store import CoordinationStore
from sparkindex.targets.base import BulkItem
from sparkindex.targets.writer import TargetWriter
from sparkindex.worker.bulk import BulkOutcome
from sparkindex.worker.lease import Lease
from sparkindex.worker.settings import WorkerSettings


@dataclass
class Batch:
    """Documents on their way to the target, with what their acknowledgement will record."""

    items: list[BulkItem] = field(default_factory=list)
    build_failures: list[tuple[str, str, str]] = field(default_factory=list)
    bytes: int = 0
    cursor: tuple[Any, ...] | None = None
    #: the cursor the batch starts after (it is made with it; ``cursor`` moves as pages are added)
    start: tuple[Any, ...] | None = field(default=None, init=False)
    #: its number in the write-ahead log of an attempt writing in place (0: not recorded)
    seq: int = 0

    def __post_init__(self) -> None:
        self.start = self.cursor


@dataclass(frozen=True)
class Claim:
    """What the writes of one claim work with: the claimed partition, its lease and its index."""

    store: CoordinationStore
    target: TargetWriter
    job_id: str
    rec: PartitionRecord
    #: the physical index being built for the partition's entity
    index: str
    lease: Lease
    settings: WorkerSettings


class Latency(Protocol):
    """The partition's bulk latency so far, saved with its progress."""

    def observe(self, seconds: float) -> None: ...

    def to_json(self) -> str: ...


class PartitionWrites(ABC):
    """One claim's writes, from a batch handed over to its acknowledgement."""

    def __init__(self, claim: Claim, latency: Latency) -> None:
        self.claim = claim
        self.latency = latency
        #: the cursor the store knows (the last acknowledged batch's)
        self.acked_cursor = claim.rec.cursor
        self.indexed = 0
        self.failed = 0
        #: applied (written, perhaps not durable yet) and not yet acknowledged, in order
        self._applied: deque[tuple[Batch, BulkOutcome]] = deque()
        self._last_sync = time.monotonic()

    # -- required ---------------------------------------------------------------------------------------
    @abstractmethod
    def send(self, batch: Batch) -> None:
        """Hand *batch* over to the target; acknowledge what is due (every ``sync_every_s``)."""

    @abstractmethod
    def acknowledge_all(self, complete: bool = False) -> None:
        """Make every batch handed over durable and record it; *complete*: the last batch
        completes the partition (an empty attempt completes it all the same)."""

    # -- optional -----------------------------------------------------------------------------------------
    def before_reading(self) -> None:
        """Called before the attempt reads from its cursor, first and after each rewind."""

    def settle(self) -> None:
        """Let the writes already on their way end, and send nothing more."""

    def _drop_in_flight(self) -> None:
        """Forget the writes still on their way (the target lost writes: they are read again)."""

    def _discard(self) -> None:
        """Throw away what was written but never acknowledged, where that is possible."""

    # -- final ----------------------------------------------------------------------------------------------
    @final
    def rewind(self) -> tuple[Any, ...] | None:
        """Forget every batch not acknowledged (the target lost writes); return the cursor to
        read on from, the last acknowledged one."""
        self._drop_in_flight()
        self._applied.clear()
        return self.acked_cursor

    @final
    def close(self) -> None:
        """The attempt is over: settle, then discard what it left unacknowledged (a later claim
        reads it again from the cursor)."""
        self.settle()
        self._discard()

    @final
    def _record(
        self,
        cursor: tuple[Any, ...] | None,
        success: int,
        failures: list[tuple[str, str, str]],
        complete: bool,
        latency: str | None,
        stage: str | None = None,
    ) -> None:
        """Record acknowledged work: its dead letters first, then the cursor and counts in one
        write (completing the partition, or naming the sealed *stage* that holds the work)."""
        c = self.claim
        rec, store = c.rec, c.store
        if failures:
            store.dead_letters.add(c.job_id, rec.entity, rec.id, failures)
        if complete:
            store.partition_rows.complete(
                rec.id, rec.claim_token, cursor, success, len(failures), latency=latency, stage=stage
            )
        else:
            store.partition_rows.save_progress(
                rec.id, rec.claim_token, cursor, success, len(failures), latency=latency, stage=stage
            )
        self.acked_cursor = cursor
        self.indexed += success
        self.failed += len(failures)


__all__ = ["Batch", "Claim", "Latency", "PartitionWrites"]
