"""The staged protocol: a claim writes into private stages the finish adopts.

Where the target stages new versions (:meth:`~sparkindex.targets.writer.TargetWriter.open_stage`:
Tantivy builds), an attempt adds its batches to a stage of its own, in its own process (Tantivy
indexes on its own threads meanwhile). Every ``sync_every_s`` and at the end it seals the stage
and records its batches in one write naming it: the store's list of a partition's stages is what
the finish adopts. A stage sealed but never recorded (a crash between the two) is never adopted,
and its batches are read again; an attempt that ends otherwise discards its open stage. So
nothing unacknowledged ever reaches the index, and there is nothing to undo.
"""

from __future__ import annotations

import time

from sparkindex.targets.writer import Stage
from sparkindex.worker.bulk import BulkOutcome
from sparkindex.worker.writes import Batch, Claim, Latency, PartitionWrites


def stage_name(partition_id: str, claim_token: int, chunk: int) -> str:
    """Names one stage of one claim of a partition (unique: a claim token is never reused)."""
    return f"{partition_id}.{claim_token}.{chunk}"


class StagedWrites(PartitionWrites):
    @classmethod
    def open(cls, claim: Claim, latency: Latency) -> StagedWrites | None:
        """The claim's staged writes, its first stage open; None where the target does not stage
        the index (its writes go through :class:`~.bulk_writes.BulkWrites`)."""
        stage = claim.target.open_stage(claim.index, stage_name(claim.rec.id, claim.rec.claim_token, 1))
        return None if stage is None else cls(claim, latency, stage)

    def __init__(self, claim: Claim, latency: Latency, stage: Stage) -> None:
        super().__init__(claim, latency)
        #: the stage being added to; None between a seal and the next batch
        self.stage: Stage | None = stage
        self._chunks = 1  # stages this claim opened

    def send(self, batch: Batch) -> None:
        """Add *batch* to the stage; seal and acknowledge when the last seal is old enough."""
        if self.stage is None:
            self.stage = self._open_stage()
        started = time.monotonic()
        self.claim.lease.check()
        rejected = self.stage.add(batch.items) if batch.items else []
        outcome = BulkOutcome(success=len(batch.items) - len(rejected))
        outcome.failures.extend((r.id, r.error_class or "BulkItemError", r.error or "rejected") for r in rejected)
        self.latency.observe(time.monotonic() - started)
        batch.items = []
        self._applied.append((batch, outcome))
        if time.monotonic() - self._last_sync >= self.claim.settings.sync_every_s:
            self._seal_and_acknowledge(complete=False)

    def acknowledge_all(self, complete: bool = False) -> None:
        self._seal_and_acknowledge(complete)

    def _discard(self) -> None:
        if self.stage is not None:
            self.stage.discard()  # unacknowledged: a later claim reads it again from the cursor

    def _open_stage(self) -> Stage:
        c = self.claim
        self._chunks += 1
        stage = c.target.open_stage(c.index, stage_name(c.rec.id, c.rec.claim_token, self._chunks))
        assert stage is not None  # the index stages: whether it does is fixed at its creation
        return stage

    def _seal_and_acknowledge(self, complete: bool) -> None:
        """Seal the current stage, then record its batches in one write naming it; an empty stage
        is discarded (only a completing acknowledgement is recorded without one)."""
        stage, self.stage = self.stage, None
        name = None
        if stage is not None and self._applied:
            stage.seal()
            name = stage.name
        elif stage is not None:
            stage.discard()
        cursor, success, failures = self.acked_cursor, 0, []
        for batch, outcome in self._applied:
            cursor = batch.cursor if batch.cursor is not None else cursor
            success += outcome.success
            failures.extend([*batch.build_failures, *outcome.failures])
        self._applied.clear()
        self._last_sync = time.monotonic()
        if complete or name is not None:
            self._record(cursor, success, failures, complete, self.latency.to_json(), stage=name)


__all__ = ["StagedWrites", "stage_name"]
