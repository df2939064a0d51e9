"""The bulk protocol: a claim writes straight into the index, bulks overlapping the reads.

Up to ``max_in_flight`` bulks are on their way (background threads) while the next batch is read
and built, and acknowledgements are recorded in order. A target that makes writes durable in
groups (Tantivy's group commit) then never stalls the reader: a bulk is applied unsynced, and a
sync, every ``sync_every_s`` and at the end, makes the applied batches durable before they are
acknowledged. If the target lost applied writes (its writer restarted), the sync raises
:class:`WritesLost` and the attempt rewinds.

Each batch is recorded in the write-ahead log before it is sent (:mod:`.in_place`): a later
claim, or this one after a rewind, first deletes what was written after the acknowledged cursor
and never acknowledged, then reads on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy.exc import DBAPIError

from sparkindex.errors import TransientError, WritesLost
from sparkindex.worker.bulk import BulkOutcome, bulk_with_retries
from sparkindex.worker.in_place import InPlaceWrites
from sparkindex.worker.writes import Batch, Claim, Latency, PartitionWrites

log = logging.getLogger(__name__)


class BulkWrites(PartitionWrites):
    def __init__(self, claim: Claim, latency: Latency) -> None:
        super().__init__(claim, latency)
        c, s = claim, claim.settings
        self._pool = ThreadPoolExecutor(max_workers=s.max_in_flight, thread_name_prefix="bulk")
        self._in_flight: deque[tuple[Batch, Future[BulkOutcome]]] = deque()
        #: writes straight into the index: recorded before each bulk, undone by a redo
        self.in_place = InPlaceWrites(c.store, c.target, c.job_id, c.rec, c.index, s.retries, s.backoff())
        # An earlier claim may have left writes nobody acknowledged; so may this one, when its
        # target lost writes and it rewinds. They are undone before reading on.
        self._undo = c.rec.claims > 1

    def before_reading(self) -> None:
        if self._undo:
            lease = self.claim.lease
            self.in_place.undo(self.acked_cursor, guard=lease.check, valid_until=lease.valid_until)
            self._undo = False

    def send(self, batch: Batch) -> None:
        """Put *batch* in flight; collect finished bulks; sync when the last sync is old enough."""
        c, s = self.claim, self.claim.settings
        while len(self._in_flight) >= s.max_in_flight:
            self._collect_oldest()
        if batch.items:  # recorded before it is sent, so that a redo can undo it
            pending = [b.seq for b, _ in self._in_flight] + [b.seq for b, _ in self._applied]
            batch.seq = self.in_place.record(batch.start, batch.items, pending)
        future = self._pool.submit(
            bulk_with_retries,
            c.target,
            c.index,
            batch.items,
            s.retries,
            s.backoff(),
            unsynced=True,
            guard=c.lease.check,  # before every request: no write once the claim cannot be proven
            valid_until=c.lease.valid_until,  # and no request of the target's outlives the lease
            raise_transient=True,  # still busy after every retry: park the partition, lose nothing
        )
        self._in_flight.append((batch, future))
        while self._in_flight and self._in_flight[0][1].done():
            self._collect_oldest()
        if self._applied and (
            time.monotonic() - self._last_sync >= s.sync_every_s or not any(o.marks for _, o in self._applied)
        ):
            self._sync_and_acknowledge()

    def acknowledge_all(self, complete: bool = False) -> None:
        c = self.claim
        while self._in_flight:
            self._collect_oldest()
        if complete and not self._applied:
            c.store.partition_rows.complete(c.rec.id, c.rec.claim_token, latency=self.latency.to_json())
        else:
            self._sync_and_acknowledge(complete)
        if complete:
            try:
                self.in_place.done()
            except (DBAPIError, TransientError) as exc:  # complete already; gc drops the entries
                log.warning("partition %s: its write-ahead entries stay until gc: %s", c.rec.id, exc)

    def settle(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _drop_in_flight(self) -> None:
        while self._in_flight:
            _, future = self._in_flight.popleft()
            with contextlib.suppress(TransientError):
                future.result()
        self._undo = True

    def _collect_oldest(self) -> None:
        batch, future = self._in_flight.popleft()
        outcome = future.result()  # TransientError here: the target stayed down
        for seconds in outcome.latencies:
            self.latency.observe(seconds)
        batch.items = []  # the documents are the target's now; keep only what the ack records
        self._applied.append((batch, outcome))

    def _sync_and_acknowledge(self, complete: bool = False) -> None:
        """Make every applied batch durable, then record them in order (the last one completing)."""
        marks = [m for _, outcome in self._applied for m in outcome.marks]
        if marks:
            if len({m.epoch for m in marks}) > 1:
                raise WritesLost("the target's writer restarted while batches were unsynced")
            self.claim.target.sync(self.claim.index, max(marks, key=lambda m: m.generation))
        self._last_sync = time.monotonic()
        while self._applied:
            batch, outcome = self._applied.popleft()
            last = not self._applied
            latency = self.latency.to_json() if last else None  # once per acknowledgement
            failures = [*batch.build_failures, *outcome.failures]
            self._record(batch.cursor, outcome.success, failures, complete and last, latency)


__all__ = ["BulkWrites"]
