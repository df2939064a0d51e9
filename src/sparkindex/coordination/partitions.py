"""Partition rows: planning, the claim, progress and outcome (a lease table, as OpenMetadata's and
Data Prepper's coordinators keep); the driver's resets (reclaim, orphans, retries) are in
:mod:`.resets`.

The worker's path is one statement per step: :meth:`claim` (one ``UPDATE ... RETURNING``; on
MySQL/MariaDB, which cannot return from an UPDATE, the UPDATE then one SELECT), then
:meth:`save_progress` per acknowledged batch and :meth:`complete` with the last batch folded in,
each one fenced ``UPDATE`` on the claim token that also renews the lease. A writer that lost its
claim finds that its update matched no row, and is told so with :class:`LockLost`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import StoreBase, rerun_on_conflict, store_clock, store_now
from sparkindex.coordination.direct import DirectConnections, DirectStatement, direct_capable
from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.records import PartitionRecord, PartitionSpec
from sparkindex.coordination.states import CLAIM_SOURCES, JobStatus, PartitionStatus, check_partition
from sparkindex.coordination.tables import Tables, Time
from sparkindex.errors import LockLost, PartitionNotFound, PermanentError
from sparkindex.keys import dump_key

P = PartitionStatus


def run_direct(direct: DirectStatement, params: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """Run a hot statement on this thread's own connection, every driver error raised as the
    :class:`sqlalchemy.exc.DBAPIError` the pooled path raises. The statement wraps what its
    cursor raises; a connection it could not make (the server refuses it) came out as the
    driver's own error, which neither the callers nor :func:`rerun_on_conflict` expect (a
    worker's lease thread died of it)."""
    try:
        return direct.run(params)
    except sa.exc.DBAPIError:
        raise
    except Exception as exc:
        dialect = direct.connections.engine.dialect
        if not isinstance(exc, dialect.loaded_dbapi.Error):
            raise
        raise sa.exc.DBAPIError.instance(
            direct.sql,
            params,
            exc,
            dialect.loaded_dbapi.Error,
            hide_parameters=True,
            connection_invalidated=bool(dialect.is_disconnect(exc, None, None)),
            dialect=dialect,
        ) from exc


def claim_order(pt: sa.Table) -> tuple[sa.ColumnElement[Any], ...]:
    """The one claim order (Data Prepper's acquisition order, OpenMetadata's LPT): re-opened
    CLOSED partitions first, then by priority, then the largest work first."""
    return (
        sa.case((pt.c.status == P.CLOSED, 0), else_=1),
        pt.c.priority.desc(),
        pt.c.work_units.desc(),
        pt.c.entity,
        pt.c.partition_index,
    )


class PartitionRows(StoreBase):
    def __init__(self, engine: Engine, tables: Tables, single: Engine | None = None) -> None:
        super().__init__(engine, tables, single)
        self._returning = engine.dialect.update_returning
        # Built once: the worker's statements cost no construction and no cache-key work per call.
        self._claim_stmt = self._build_claim(take_over_run=True)
        self._claim_free_stmt = self._build_claim(take_over_run=False)
        self._progress_stmt = self._build_progress(None)
        self._complete_stmt = self._build_progress(P.COMPLETED)
        # PostgreSQL: the same statements, run on psycopg's cursor (coordination.direct says why)
        self._direct: dict[int, DirectStatement] = {}
        capable = self.single is not engine and direct_capable(self.single)
        url = self.single.url.render_as_string(hide_password=False)
        self.direct_connections = DirectConnections(
            make_engine(url, autocommit=True, pooled=False) if capable else self.single
        )
        if capable:
            for stmt in (self._claim_stmt, self._claim_free_stmt, self._progress_stmt, self._complete_stmt):
                self._direct[id(stmt)] = DirectStatement(self.direct_connections, stmt)

    def direct_statements(self) -> list[DirectStatement]:
        """The hot statements that run on the driver's cursor (none off PostgreSQL)."""
        return list(self._direct.values())

    # -- planning and reading ----------------------------------------------------------------------
    @rerun_on_conflict
    def add_partitions(self, job_id: str, specs: Sequence[PartitionSpec]) -> None:
        rows = [
            {
                "id": str(uuid.uuid4()),
                "job_id": job_id,
                "entity": s.entity,
                "partition_index": s.partition_index,
                "range_start": dump_key(s.range_start),
                "range_end": dump_key(s.range_end),
                "estimated_count": s.estimated_count,
                "work_units": s.work_units,
                "priority": s.priority,
                "status": P.PENDING,
            }
            for s in specs
        ]
        with self.engine.begin() as conn:
            for i in range(0, len(rows), 500):
                conn.execute(self.t.partition.insert(), rows[i : i + 500])

    @rerun_on_conflict
    def partition(self, partition_id: str) -> PartitionRecord:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.t.partition).where(self.t.partition.c.id == partition_id)).first()
        if row is None:
            raise PermanentError(f"partition {partition_id!r} not found")
        return PartitionRecord.from_row(row)

    @rerun_on_conflict
    def partitions(self, job_id: str, statuses: Sequence[PartitionStatus] | None = None) -> list[PartitionRecord]:
        """The job's partitions in claim order."""
        pt = self.t.partition
        stmt = sa.select(pt).where(pt.c.job_id == job_id)
        if statuses is not None:
            stmt = stmt.where(pt.c.status.in_([str(s) for s in statuses]))
        with self.engine.connect() as conn:
            return [PartitionRecord.from_row(r) for r in conn.execute(stmt.order_by(*claim_order(pt)))]

    @rerun_on_conflict
    def claimable(self, job_id: str, now: float | None = None, limit: int | None = None) -> list[PartitionRecord]:
        """What a pass hands to its workers, in claim order: PENDING ones and CLOSED ones whose
        ``reopen_at`` has come (the first *limit* of them). (PROCESSING ones come back through
        :meth:`reclaim_stale`.)"""
        pt = self.t.partition
        with self.engine.connect() as conn:
            now = store_now(conn) if now is None else now  # reopen_at is on the store's clock
            due = sa.or_(pt.c.status == P.PENDING, sa.and_(pt.c.status == P.CLOSED, pt.c.reopen_at <= now))
            stmt = sa.select(pt).where(pt.c.job_id == job_id, due).order_by(*claim_order(pt))
            rows = conn.execute(stmt if limit is None else stmt.limit(limit))
            return [PartitionRecord.from_row(r) for r in rows]

    @rerun_on_conflict
    def claimed_by_others(self, job_id: str, run_id: str, owner: str) -> bool:
        """Whether a worker of *run_id* other than *owner* has claimed a partition of the job
        (holds or completed one): the driver's head start ends when the Spark tasks have begun."""
        pt = self.t.partition
        stmt = sa.select(
            sa.exists().where(
                pt.c.job_id == job_id,
                pt.c.run_id == run_id,
                pt.c.owner != owner,
                pt.c.status.in_([P.PROCESSING, P.COMPLETED]),
            )
        )
        with self.engine.connect() as conn:
            return bool(conn.execute(stmt).scalar())

    # -- the claim ---------------------------------------------------------------------------------
    def _build_claim(self, take_over_run: bool) -> sa.Update:
        """Built once. Which states a claim may start from is :data:`states.CLAIM_SOURCES` (the
        transition table); each needs its guard here, so a new source state cannot slip in unguarded.
        *take_over_run*: a claim may take a partition another attempt of the same run holds."""
        pt = self.t.partition
        # heartbeats are written and judged on the store's clock: a claimer whose wall clock ran
        # ahead would take live partitions over, a holder whose clock fell behind would look dead
        now = store_clock(self.engine.dialect)
        stale = sa.func.coalesce(pt.c.last_heartbeat, 0.0) < now - sa.bindparam("b_stale_s", type_=Time)
        guards: dict[PartitionStatus, sa.ColumnElement[bool]] = {
            P.PENDING: pt.c.status == P.PENDING,
            # parked by close_partition until reopen_at
            P.CLOSED: sa.and_(pt.c.status == P.CLOSED, sa.func.coalesce(pt.c.reopen_at, 0.0) <= now),
            # a retry of the same Spark task (same run), or a holder whose lease ran out
            P.PROCESSING: sa.and_(
                pt.c.status == P.PROCESSING,
                sa.or_(pt.c.run_id == sa.bindparam("b_run_id"), stale) if take_over_run else stale,
            ),
        }
        if set(guards) != CLAIM_SOURCES:
            raise AssertionError(f"claim guards {sorted(guards)} do not match the transitions {sorted(CLAIM_SOURCES)}")
        for source in guards:
            check_partition(source, P.PROCESSING)
        jt = self.t.job
        # a job being stopped hands out nothing more: checked by the claim itself rather than by a
        # read before it (one statement less per partition, and a narrower window: a stop that
        # commits while the claim runs may still let it through; the worker's stopping() check
        # catches that one). On MySQL/MariaDB the subquery share-locks the job row for the claim.
        not_stopping = ~sa.exists().where(jt.c.id == pt.c.job_id, jt.c.status == JobStatus.STOPPING)
        stmt = (
            pt.update()
            .where(pt.c.id == sa.bindparam("b_id"), sa.or_(*guards.values()), not_stopping)
            .values(
                status=P.PROCESSING,
                owner=sa.bindparam("b_owner"),
                run_id=sa.bindparam("b_run_id"),
                claim_token=pt.c.claim_token + 1,
                claims=pt.c.claims + 1,
                claimed_at=now,
                started_at=sa.func.coalesce(pt.c.started_at, now),
                last_heartbeat=now,
            )
        )
        return stmt.returning(*pt.c) if self._returning else stmt

    @rerun_on_conflict
    def claim(
        self, partition_id: str, owner: str, run_id: str, stale_after_s: float, take_over_run: bool = True
    ) -> PartitionRecord | None:
        """Claim one specific partition for a worker; one statement.

        Allowed when it is PENDING, CLOSED and re-opened, held by an earlier attempt of this same
        run (Spark retried or speculated the task; not with *take_over_run* False: workers of one
        run that share a queue of partitions must not take each other's), or held by anyone whose
        lease (heartbeat) is older than *stale_after_s*. Returns None when its job is being
        stopped, when it is finished or parked, or when a live process elsewhere holds it; the
        returned record carries the new claim token.
        """
        now = time.time()
        params = {
            "b_id": partition_id,
            "b_owner": owner,
            "b_run_id": run_id,
            "b_now": now,  # SQLite only: elsewhere the store reads its own clock
            "b_stale_s": stale_after_s,
        }
        pt = self.t.partition
        stmt = self._claim_stmt if take_over_run else self._claim_free_stmt
        direct = self._direct.get(id(stmt))
        if direct is not None:
            _, claimed = run_direct(direct, params)
            if claimed is not None:
                return PartitionRecord.from_mapping(claimed)
        # RETURNING: one autocommit statement; MySQL/MariaDB: UPDATE then SELECT in one transaction
        with (self.single if self._returning else self.engine).begin() as conn:
            if direct is not None:
                row = None  # the claim above matched nothing
            elif self._returning:
                row = conn.execute(stmt, params).first()
            elif conn.execute(stmt, params).rowcount == 1:
                row = conn.execute(sa.select(pt).where(pt.c.id == partition_id)).first()
            else:
                row = None
            if row is not None:
                return PartitionRecord.from_row(row)
            # not claimable: the rare path may afford a second look, to tell "unknown" apart
            if conn.execute(sa.select(pt.c.id).where(pt.c.id == partition_id)).first() is None:
                raise PartitionNotFound(f"partition {partition_id!r} not found")
        return None

    @rerun_on_conflict
    def count_partition_not_found(self, job_id: str) -> None:
        """A worker of *job_id* was given a partition the store does not hold; counted on the
        job (``partition_not_found``), where ``status`` shows it."""
        jt = self.t.job
        with self.engine.begin() as conn:
            conn.execute(jt.update().where(jt.c.id == job_id).values(partition_not_found=jt.c.partition_not_found + 1))

    # -- progress and outcome (all fenced by the claim token) --------------------------------------
    def _build_progress(self, to: PartitionStatus | None) -> sa.Update:
        """The fenced UPDATE of an acknowledged batch (and, with *to*, of the completion it ends):
        counts added, cursor and writer set when given, lease renewed."""
        pt = self.t.partition
        ok, bad = sa.bindparam("b_ok", type_=sa.BigInteger), sa.bindparam("b_bad", type_=sa.BigInteger)
        now = store_clock(self.engine.dialect)  # the lease renewed on the store's clock (see _build_claim)
        stage = sa.bindparam("b_stage", type_=sa.Text)
        values: dict[str, Any] = {
            "processed_count": pt.c.processed_count + ok + bad,
            "success_count": pt.c.success_count + ok,
            "failed_count": pt.c.failed_count + bad,
            "cursor": sa.func.coalesce(sa.bindparam("b_cursor", type_=sa.Text), pt.c.cursor),
            "writer": sa.func.coalesce(sa.bindparam("b_writer", type_=sa.String), pt.c.writer),
            "bulk_latency": sa.func.coalesce(sa.bindparam("b_latency", type_=sa.Text), pt.c.bulk_latency),
            "stages": sa.case(
                (stage.is_(None), pt.c.stages),
                (pt.c.stages.is_(None), stage),
                else_=pt.c.stages + "," + stage,
            ),
            "last_heartbeat": now,
        }
        conditions = [
            pt.c.id == sa.bindparam("b_id"),
            pt.c.claim_token == sa.bindparam("b_token", type_=sa.BigInteger),
            pt.c.status == P.PROCESSING,
        ]
        if to is not None:
            check_partition(P.PROCESSING, to)
            values.update(status=to, completed_at=now)
        else:
            # Cursors only move forward, so a batch whose cursor is already stored was counted:
            # a rerun after a lost reply must not add its counts twice.
            cursor = sa.bindparam("b_cursor_seen", type_=sa.Text)
            conditions.append(sa.or_(cursor.is_(None), pt.c.cursor.is_(None), pt.c.cursor != cursor))
        return pt.update().where(*conditions).values(**values)

    @rerun_on_conflict
    def _run_fenced(self, stmt: sa.Update, params: dict[str, Any], partition_id: str, token: int, to: Any) -> None:
        direct = self._direct.get(id(stmt))
        if direct is not None and run_direct(direct, params)[0] == 1:
            return
        with self.single.begin() as conn:
            if direct is None and conn.execute(stmt, params).rowcount == 1:
                return
            # A rerun whose first run committed but lost its reply: completed already, or its
            # batch's cursor already stored.
            pt = self.t.partition
            mine = sa.select(pt.c.id).where(pt.c.id == partition_id, pt.c.claim_token == token)
            if to == P.COMPLETED:
                if conn.execute(mine.where(pt.c.status == to)).first() is not None:
                    return
            elif to is None and params.get("b_cursor") is not None:
                seen = mine.where(pt.c.status == P.PROCESSING, pt.c.cursor == params["b_cursor"])
                if conn.execute(seen).first() is not None:
                    return
            # refused: counted on the partition (``update_errors``: updates a lost claim tried to make)
            conn.execute(pt.update().where(pt.c.id == partition_id).values(update_errors=pt.c.update_errors + 1))
        raise LockLost(f"partition {partition_id}: claim {token} is no longer the owner")

    def _fenced(self, partition_id: str, token: int, to: PartitionStatus | None, **values: Any) -> None:
        """A fenced state change off the worker's hot path (release, close, fail)."""
        pt = self.t.partition
        if to is not None:
            check_partition(P.PROCESSING, to)
            values["status"] = to
        stmt = (
            pt.update()
            .where(pt.c.id == partition_id, pt.c.claim_token == token, pt.c.status == P.PROCESSING)
            .values(**values)
        )
        self._run_fenced(stmt, {}, partition_id, token, to)

    def _progress(
        self,
        stmt: sa.Update,
        partition_id: str,
        token: int,
        cursor: Sequence[Any] | None,
        success: int,
        failed: int,
        writer: str | None,
        to: PartitionStatus | None,
        latency: str | None = None,
        stage: str | None = None,
    ) -> None:
        params = {
            "b_latency": latency,
            "b_stage": stage,
            "b_id": partition_id,
            "b_token": token,
            "b_ok": success,
            "b_bad": failed,
            "b_cursor": dump_key(cursor),
            "b_cursor_seen": dump_key(cursor),
            "b_writer": writer,
            "b_now": time.time(),
        }
        self._run_fenced(stmt, params, partition_id, token, to)

    def save_progress(
        self,
        partition_id: str,
        token: int,
        cursor: Sequence[Any] | None,
        success: int,
        failed: int,
        writer: str | None = None,
        latency: str | None = None,
        stage: str | None = None,
    ) -> None:
        """Record an acknowledged batch: move the cursor, add the counts, renew the lease (and
        store the partition's bulk latency histogram, :mod:`sparkindex.coordination.latency`). *stage*
        names the sealed stage that holds the batch, where the target stages new versions."""
        self._progress(self._progress_stmt, partition_id, token, cursor, success, failed, writer, None, latency, stage)

    def heartbeat(self, partition_id: str, token: int) -> None:
        """Renew the lease while a long page is being read (no batch acknowledged yet)."""
        self._progress(self._progress_stmt, partition_id, token, None, 0, 0, None, None)

    def complete(
        self,
        partition_id: str,
        token: int,
        cursor: Sequence[Any] | None = None,
        success: int = 0,
        failed: int = 0,
        writer: str | None = None,
        latency: str | None = None,
        stage: str | None = None,
    ) -> None:
        """Finish the partition, its last acknowledged batch folded in: one statement, not two."""
        self._progress(
            self._complete_stmt, partition_id, token, cursor, success, failed, writer, P.COMPLETED, latency, stage
        )

    def release(self, partition_id: str, token: int) -> None:
        """Give a partition back untouched by failure (graceful stop); its cursor is kept."""
        self._fenced(partition_id, token, P.PENDING, owner=None)

    def close_partition(self, partition_id: str, token: int, reopen_after_s: float, error: str | None = None) -> None:
        """Park a partition for *reopen_after_s* (Data Prepper's CLOSED / reOpenAt): the worker
        does this when the target is down, instead of burning a retry; :meth:`claim` and
        :meth:`claimable` pick it up again once its ``reopen_at`` has come, on the store's clock
        (as they judge it). Its cursor is kept."""
        pt = self.t.partition
        reopen_at = store_clock(self.engine.dialect) + sa.bindparam("b_after_s", reopen_after_s, type_=Time)
        if self.engine.dialect.name == "sqlite":
            reopen_at = sa.literal(time.time() + reopen_after_s, Time)  # SQLite: the process's clock is the store's
        values: dict[str, Any] = {"owner": None, "reopen_at": reopen_at, "closed_count": pt.c.closed_count + 1}
        if error is not None:
            values["last_error"] = error[:4000]
        self._fenced(partition_id, token, P.CLOSED, **values)

    def fail(self, partition_id: str, token: int, error: str, max_retries: int) -> PartitionStatus:
        """A failed attempt: back to PENDING while under *max_retries*, FAILED beyond it."""
        current = self.partition(partition_id)
        to = P.PENDING if current.retry_count < max_retries else P.FAILED
        pt = self.t.partition
        self._fenced(partition_id, token, to, owner=None, last_error=error[:4000], retry_count=pt.c.retry_count + 1)
        return to
