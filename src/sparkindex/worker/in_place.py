"""One attempt's writes into an index written in place: recorded before each bulk, undone by a redo.

See :mod:`sparkindex.coordination.write_ahead` for why. A partition attempt whose writes go
straight into the new version (a search engine, or Tantivy's writer service) records each batch's
ids before sending it; an attempt that follows one which may have left unacknowledged writes (a
later claim, or the same claim after a rewind) deletes those documents first, durably, then reads
from the stored cursor. Attempts that write into a private stage (Tantivy builds) need none of
this: an unacknowledged stage is never adopted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.write_ahead import Written
from sparkindex.errors import TransientError, WritesLost
from sparkindex.retry import Backoff
from sparkindex.targets.base import BulkItem
from sparkindex.targets.writer import TargetWriter
from sparkindex.worker.bulk import bulk_with_retries

log = logging.getLogger(__name__)


class InPlaceWrites:
    def __init__(
        self,
        store: CoordinationStore,
        target: TargetWriter,
        job_id: str,
        rec: PartitionRecord,
        index: str,
        retries: int,
        backoff: Backoff,
    ) -> None:
        self.store = store
        self.target = target
        self.job_id = job_id
        self.rec = rec
        self.index = index
        self.retries = retries
        self.backoff = backoff
        self.seq = 0  # batches this claim recorded

    def record(self, after: Sequence[Any] | None, items: Sequence[BulkItem], pending: Iterable[int]) -> int:
        """Record a batch starting after cursor *after*, about to write *items*, before it is
        sent; *pending* are the sequence numbers of this claim's batches not acknowledged yet
        (the entries below the oldest are forgotten). Returns the batch's sequence number."""
        self.seq += 1
        oldest = min((seq for seq in pending if seq > 0), default=self.seq)
        written = [Written(i.id, i.routing, i.version) for i in items]
        self.store.write_ahead.record(self.job_id, self.rec.id, self.rec.claim_token, self.seq, after, written, oldest)
        return self.seq

    def undo(
        self,
        cursor: Sequence[Any] | None,
        guard: Callable[[], None] | None = None,
        valid_until: Callable[[], float] | None = None,
    ) -> int:
        """Delete from the index every document that an earlier claim, or this one before a
        rewind, wrote after *cursor* (the acknowledged one) without acknowledging it; durable
        before the entries are forgotten and before anything is read. A row that still exists
        is read and written again by this attempt. *guard* is the lease check run before every
        request and *valid_until* the lease's end (:func:`~sparkindex.worker.bulk.bulk_with_retries`).
        Returns how many documents
        were deleted."""
        rec = self.rec
        written = self.store.write_ahead.unacknowledged(rec.id, rec.claim_token, cursor)
        if written:
            # external versions as written (external_gte: the delete is not older than what it removes)
            items = [BulkItem(d.id, op="delete", routing=d.routing, version=d.version) for d in written]
            outcome = bulk_with_retries(
                self.target,
                self.index,
                items,
                self.retries,
                self.backoff,
                unsynced=True,
                guard=guard,
                valid_until=valid_until,
            )
            if outcome.failures:
                doc_id, error_class, message = outcome.failures[0]
                raise TransientError(
                    f"could not delete {len(outcome.failures)} unacknowledged write(s) of partition {rec.id} "
                    f"from {self.index} (first: {doc_id}: {error_class}: {message})"
                )
            if outcome.marks:
                if len({m.epoch for m in outcome.marks}) > 1:
                    raise WritesLost("the target's writer restarted while unacknowledged writes were being undone")
                self.target.sync(self.index, max(outcome.marks, key=lambda m: m.generation))
            log.info(
                "partition %s: deleted %d document(s) written after cursor %s and never acknowledged; "
                "the rows that still exist are read again",
                rec.id,
                len(items),
                cursor,
            )
        self.store.write_ahead.forget(rec.id, rec.claim_token, self.seq)
        return len(written)

    def done(self) -> None:
        """The partition is complete: every write it made is acknowledged."""
        self.store.write_ahead.forget(self.rec.id)


__all__ = ["InPlaceWrites"]
