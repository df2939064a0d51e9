"""Writes a partition attempt sent to an index written in place, recorded before they are sent.

A search engine applies a bulk in place: once it lands, its documents are in the new version
whether or not the worker lives to record its acknowledgement. A redo starts from the stored
cursor and writes again whatever it reads, so a row that still exists comes back as an upsert. A
row deleted in between (or made unbuildable) is never read again, and its document would stay in
the version, acknowledged by nobody: the count check before the swap would refuse the job on
every rerun.

So before each bulk of an attempt that writes in place (not into a private stage), the worker
records here what the bulk is about to write (id, routing, external version) and the cursor the
batch starts after. An attempt that finds entries of earlier claims (or its own, after a rewind)
that the stored cursor does not cover deletes those documents from the index, makes the deletes
durable, and only then forgets the entries and reads: a row that still exists is written again
by the redo, one that does not stays deleted.

Which entries the cursor covers: batches are acknowledged in order, each moving the cursor past
its rows, so the stored cursor is the start cursor of the first unacknowledged entry (in claim
token, then sequence, order), or the end of the last one. Entries before that one hold only
acknowledged documents, which are never deleted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.states import PartitionStatus
from sparkindex.errors import LockLost
from sparkindex.keys import dump_key, load_key


class Written(NamedTuple):
    """One document a batch wrote, as much of it as deleting it again takes."""

    id: str
    routing: str | None = None
    version: int | None = None


def encode_written(docs: Sequence[Written]) -> str:
    """The id alone, or [id, routing, version] when either is set."""
    return orjson.dumps([d.id if d.routing is None and d.version is None else list(d) for d in docs]).decode()


def decode_written(text: str) -> list[Written]:
    return [Written(e) if isinstance(e, str) else Written(*e) for e in orjson.loads(text)]


def merge_written(docs: Sequence[Written]) -> list[Written]:
    """One entry per (id, routing), with the highest version written (an external-version delete
    must not be older than the document it removes)."""
    merged: dict[tuple[str, str | None], Written] = {}
    for doc in docs:
        key = (doc.id, doc.routing)
        seen = merged.get(key)
        if seen is None or (doc.version is not None and (seen.version is None or doc.version > seen.version)):
            merged[key] = doc
    return list(merged.values())


class WriteAheadLog:
    """The ``write_ahead`` table: one row per batch sent and not yet known to be acknowledged."""

    def __init__(self, engine: Engine, table: sa.Table, partition: sa.Table) -> None:
        self.engine = engine
        self.t = table
        self.pt = partition

    @rerun_on_conflict
    def record(
        self,
        job_id: str,
        partition_id: str,
        claim_token: int,
        seq: int,
        after: Sequence[Any] | None,
        docs: Sequence[Written],
        acknowledged_below: int,
    ) -> None:
        """Record that batch *seq* of claim *claim_token* (starting after cursor *after*) is
        about to write *docs*, and forget this claim's entries below *acknowledged_below*
        (acknowledged since). Fenced by the claim: raises :class:`LockLost` (and records
        nothing) when another claim owns the partition, so the batch is never sent."""
        t, pt = self.t, self.pt
        with self.engine.begin() as conn:
            # The conditional UPDATE changes nothing: it proves the claim and locks its row (on
            # PostgreSQL/MySQL) until the entry is in. The token alone is not proof: a driver's
            # reclaim, a park or a release end a claim without a new one.
            held = conn.execute(
                pt.update()
                .where(
                    pt.c.id == partition_id, pt.c.claim_token == claim_token, pt.c.status == PartitionStatus.PROCESSING
                )
                .values(claim_token=pt.c.claim_token)
            ).rowcount
            if held != 1:
                raise LockLost(f"partition {partition_id}: claim {claim_token} no longer holds it; not writing")
            mine = sa.and_(t.c.partition_id == partition_id, t.c.claim_token == claim_token)
            # acknowledged since; and this very entry, when a rerun follows a lost reply
            conn.execute(t.delete().where(mine, sa.or_(t.c.seq < acknowledged_below, t.c.seq == seq)))
            conn.execute(
                t.insert().values(
                    partition_id=partition_id,
                    claim_token=claim_token,
                    seq=seq,
                    job_id=job_id,
                    after_cursor=dump_key(after),
                    docs=encode_written(docs),
                    written_at=time.time(),
                )
            )

    @rerun_on_conflict
    def unacknowledged(self, partition_id: str, claim_token: int, cursor: Sequence[Any] | None) -> list[Written]:
        """The documents written by claims up to *claim_token* that the stored *cursor* does not
        cover (see the module doc), one per id."""
        t = self.t
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.c.after_cursor, t.c.docs)
                .where(t.c.partition_id == partition_id, t.c.claim_token <= claim_token)
                .order_by(t.c.claim_token, t.c.seq)
            ).all()
        cursor = load_key(dump_key(cursor))  # compared as stored
        for first, row in enumerate(rows):
            if load_key(row.after_cursor) == cursor:
                return merge_written([d for r in rows[first:] for d in decode_written(r.docs)])
        return []

    @rerun_on_conflict
    def forget(self, partition_id: str, claim_token: int | None = None, upto_seq: int | None = None) -> None:
        """Forget the partition's entries: all of them (*claim_token* None: it is complete), or
        those of earlier claims and this claim's up to *upto_seq* (undone, or acknowledged)."""
        t = self.t
        cond: sa.ColumnElement[bool] = t.c.partition_id == partition_id
        if claim_token is not None:
            earlier = t.c.claim_token < claim_token
            if upto_seq is not None:
                earlier = sa.or_(earlier, sa.and_(t.c.claim_token == claim_token, t.c.seq <= upto_seq))
            cond = sa.and_(cond, earlier)
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(cond))

    @rerun_on_conflict
    def forget_job(self, job_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.t.delete().where(self.t.c.job_id == job_id))

    @rerun_on_conflict
    def entries(self, partition_id: str) -> list[tuple[int, int]]:
        """(claim token, sequence) of the partition's entries, in order (for tests and status)."""
        t = self.t
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.c.claim_token, t.c.seq)
                .where(t.c.partition_id == partition_id)
                .order_by(t.c.claim_token, t.c.seq)
            )
            return [(int(r.claim_token), int(r.seq)) for r in rows]


__all__ = ["WriteAheadLog", "Written", "decode_written", "encode_written", "merge_written"]
