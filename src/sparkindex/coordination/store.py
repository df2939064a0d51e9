"""The SQL coordination store: jobs, partitions and their stats.

Every state change is a conditional UPDATE on the state (and, for partitions, the claim token)
that was read in the same transaction, after :mod:`states` has approved the move. A writer that
lost its claim finds that its update matched no row, and is told so with :class:`LockLost`.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from sparkindex.config.secrets import redact_url
from sparkindex.coordination.dead_letters import DeadLetterStore
from sparkindex.coordination.engine import ensure_schema, make_engine
from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.records import EntityStats, JobRecord, PartitionRecord, PartitionSpec
from sparkindex.coordination.states import (
    JobStatus,
    PartitionStatus,
    check_job,
    check_partition,
)
from sparkindex.coordination.tables import make_tables
from sparkindex.errors import LockLost, PermanentError, TransientError
from sparkindex.retry import Backoff

T = TypeVar("T")

P = PartitionStatus


def _dump_key(key: Sequence[Any] | None) -> str | None:
    return None if key is None else orjson.dumps(list(key)).decode()


def retryable(exc: DBAPIError) -> bool:
    """Deadlocks, serialization failures and dropped connections: the transaction may simply rerun."""
    code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return bool(exc.connection_invalidated) or code in (1213, 1205, 2006, 2013) or sqlstate in ("40P01", "40001")


def rerun_on_conflict(fn: Callable[..., T]) -> Callable[..., T]:
    """Rerun a whole store transaction that the database aborted as a deadlock victim (InnoDB does
    this under concurrent SKIP LOCKED claims) or lost to a restart; capped backoff with jitter."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        backoff = Backoff(initial_s=0.005, max_s=1.0, deadline_s=120.0)
        while True:
            try:
                return fn(*args, **kwargs)
            except DBAPIError as exc:
                if not retryable(exc) or backoff.expired():
                    raise
                time.sleep(backoff.next_delay())

    return wrapper


def alias_key(aliases: Sequence[str]) -> str:
    return ",".join(sorted(aliases))


class CoordinationStore:
    def __init__(self, url: str, prefix: str = "") -> None:
        self.url = url
        self.engine = make_engine(url)
        self.t = make_tables(prefix)
        try:
            ensure_schema(self.engine, self.t)
        except DBAPIError as exc:
            raise TransientError(
                f"coordination store {redact_url(url)} is unreachable: {redact_url(str(exc.orig)).strip()}"
            ) from None
        self._optimistic_claims = self.engine.dialect.name == "mysql"
        self._claim_stmts: tuple[Any, Any] | None = None
        self.locks = LockManager(self.engine, self.t.lock)
        self.dead_letters = DeadLetterStore(self.engine, self.t.dead_letter)

    def close(self) -> None:
        self.engine.dispose()

    # -- jobs --------------------------------------------------------------------------------------
    def create_job(self, aliases: Sequence[str], config: dict[str, Any], created_by: str) -> JobRecord:
        now = time.time()
        job_id = str(uuid.uuid4())
        with self.engine.begin() as conn:
            conn.execute(
                self.t.job.insert().values(
                    id=job_id,
                    alias_key=alias_key(aliases),
                    status=JobStatus.INITIALIZING,
                    config_json=orjson.dumps(config).decode(),
                    targets_json="{}",
                    created_by=created_by,
                    created_at=now,
                    updated_at=now,
                )
            )
        return self.job(job_id)

    def job(self, job_id: str) -> JobRecord:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.t.job).where(self.t.job.c.id == job_id)).first()
        if row is None:
            raise PermanentError(f"job {job_id!r} not found in the coordination store")
        return JobRecord.from_row(row)

    def jobs(
        self, aliases: Sequence[str] | None = None, statuses: Sequence[JobStatus] | None = None
    ) -> list[JobRecord]:
        stmt = sa.select(self.t.job).order_by(self.t.job.c.created_at.desc())
        if aliases is not None:
            stmt = stmt.where(self.t.job.c.alias_key == alias_key(aliases))
        if statuses is not None:
            stmt = stmt.where(self.t.job.c.status.in_([str(s) for s in statuses]))
        with self.engine.connect() as conn:
            return [JobRecord.from_row(r) for r in conn.execute(stmt)]

    def transition_job(self, job_id: str, to: JobStatus, *, error: str | None = None, **values: Any) -> JobRecord:
        now = time.time()
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(self.t.job.c.status).where(self.t.job.c.id == job_id)).first()
            if row is None:
                raise PermanentError(f"job {job_id!r} not found")
            check_job(row.status, to)
            extra: dict[str, Any] = {"status": to, "updated_at": now, **values}
            if to == JobStatus.RUNNING:
                extra.setdefault("started_at", now)
            if to in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.FAILED, JobStatus.STOPPED):
                extra["completed_at"] = now
            if error is not None:
                extra["error_message"] = error
            res = conn.execute(
                self.t.job.update().where(self.t.job.c.id == job_id, self.t.job.c.status == row.status).values(**extra)
            )
            if res.rowcount != 1:
                raise LockLost(f"job {job_id!r} changed state concurrently")
        return self.job(job_id)

    def update_job(self, job_id: str, **values: Any) -> None:
        if "targets" in values:
            values["targets_json"] = orjson.dumps(values.pop("targets")).decode()
        if "stats" in values:
            values["stats_json"] = orjson.dumps(values.pop("stats")).decode()
        with self.engine.begin() as conn:
            conn.execute(self.t.job.update().where(self.t.job.c.id == job_id).values(updated_at=time.time(), **values))

    # -- partitions: planning and reading ----------------------------------------------------------
    def add_partitions(self, job_id: str, specs: Sequence[PartitionSpec]) -> None:
        rows = [
            {
                "id": str(uuid.uuid4()),
                "job_id": job_id,
                "entity": s.entity,
                "partition_index": s.partition_index,
                "range_start": _dump_key(s.range_start),
                "range_end": _dump_key(s.range_end),
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

    def partition(self, partition_id: str) -> PartitionRecord:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.t.partition).where(self.t.partition.c.id == partition_id)).first()
        if row is None:
            raise PermanentError(f"partition {partition_id!r} not found")
        return PartitionRecord.from_row(row)

    def partitions(self, job_id: str, statuses: Sequence[PartitionStatus] | None = None) -> list[PartitionRecord]:
        """Partitions in processing order: priority, then the largest work first (LPT)."""
        pt = self.t.partition
        stmt = sa.select(pt).where(pt.c.job_id == job_id)
        if statuses is not None:
            stmt = stmt.where(pt.c.status.in_([str(s) for s in statuses]))
        stmt = stmt.order_by(pt.c.priority.desc(), pt.c.work_units.desc(), pt.c.entity, pt.c.partition_index)
        with self.engine.connect() as conn:
            return [PartitionRecord.from_row(r) for r in conn.execute(stmt)]

    # -- partitions: claiming ----------------------------------------------------------------------
    def _claim_values(self, owner: Any, run_id: Any, now: Any) -> dict[str, Any]:
        """The SET clause of every claim; values or bind parameters."""
        pt = self.t.partition
        return {
            "status": P.PROCESSING,
            "owner": owner,
            "run_id": run_id,
            "claim_token": pt.c.claim_token + 1,
            "claims": pt.c.claims + 1,
            "claimed_at": now,
            "started_at": sa.func.coalesce(pt.c.started_at, now),
            "last_heartbeat": now,
        }

    @rerun_on_conflict
    def claim_next(self, job_id: str, owner: str, run_id: str | None = None) -> PartitionRecord | None:
        """Acquire the next partition (Data Prepper order): re-opened CLOSED ones, then PENDING.

        PostgreSQL and SQLite pick with ``FOR UPDATE SKIP LOCKED`` (SQLite: inside an immediate
        transaction). InnoDB locks every row it reads while sorting, so there SKIP LOCKED would hide
        all work behind one in-flight claim; MySQL/MariaDB instead read a few candidates without
        locks and take the first whose conditional UPDATE still finds it unclaimed.
        """
        pt = self.t.partition
        order = (pt.c.priority.desc(), pt.c.work_units.desc(), pt.c.entity, pt.c.partition_index)
        now = time.time()
        conds = (sa.and_(pt.c.status == P.CLOSED, pt.c.reopen_at <= now), pt.c.status == P.PENDING)
        if not self._optimistic_claims and self.engine.dialect.update_returning:
            return self._claim_next_returning(job_id, owner, run_id, now)
        while True:
            claimed: str | None = None
            with self.engine.begin() as conn:
                candidates: list[Any] = []
                for cond in conds:
                    pick = sa.select(pt.c.id, pt.c.status).where(pt.c.job_id == job_id, cond).order_by(*order)
                    if self._optimistic_claims:
                        candidates = list(conn.execute(pick.limit(16)))
                    else:
                        candidates = list(conn.execute(pick.limit(1).with_for_update(skip_locked=True)))
                    if candidates:
                        break
                if not candidates:
                    return None
                for row in candidates:
                    check_partition(row.status, P.PROCESSING)
                    res = conn.execute(
                        pt.update()
                        .where(pt.c.id == row.id, pt.c.status == row.status)
                        .values(**self._claim_values(owner, run_id, now))
                    )
                    if res.rowcount == 1:
                        claimed = row.id
                        break
            if claimed is not None:
                return self.partition(claimed)
            # every candidate was taken meanwhile: look again

    def _claim_next_returning(self, job_id: str, owner: str, run_id: str | None, now: float) -> PartitionRecord | None:
        """The seed's one statement: UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING."""
        for src in (P.CLOSED, P.PENDING):
            check_partition(src, P.PROCESSING)
        params = {"b_job_id": job_id, "b_owner": owner, "b_run_id": run_id, "b_now": now}
        with self.engine.begin() as conn:
            for stmt in self._claim_next_statements():  # re-opened CLOSED first, then PENDING
                row = conn.execute(stmt, params).first()
                if row is not None:
                    return PartitionRecord.from_row(row)
        return None

    def _claim_next_statements(self) -> tuple[Any, Any]:
        """Built once: each claim then costs one index probe and no statement construction."""
        if self._claim_stmts is None:
            pt = self.t.partition
            order = (pt.c.priority.desc(), pt.c.work_units.desc(), pt.c.entity, pt.c.partition_index)
            now = sa.bindparam("b_now", type_=sa.Float)
            job = pt.c.job_id == sa.bindparam("b_job_id")
            values = self._claim_values(sa.bindparam("b_owner"), sa.bindparam("b_run_id"), now)
            stmts = []
            for cond in (sa.and_(pt.c.status == P.CLOSED, pt.c.reopen_at <= now), pt.c.status == P.PENDING):
                pick = (
                    sa.select(pt.c.id)
                    .where(job, cond)
                    .order_by(*order)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                    .scalar_subquery()
                )
                stmts.append(pt.update().where(pt.c.id == pick).values(**values).returning(*pt.c))
            self._claim_stmts = (stmts[0], stmts[1])
        return self._claim_stmts

    @rerun_on_conflict
    def claim(self, partition_id: str, owner: str, run_id: str, stale_after_s: float) -> PartitionRecord | None:
        """Claim one specific partition for a Spark task.

        Allowed when it is PENDING, re-opened, held by an earlier attempt of this same run (Spark
        retried or speculated the task), or held by anyone whose heartbeat is stale. Returns None
        when the partition is finished or a live process elsewhere holds it.
        """
        pt = self.t.partition
        now = time.time()
        with self.engine.begin() as conn:
            row = conn.execute(
                sa.select(pt.c.status, pt.c.run_id, pt.c.last_heartbeat, pt.c.reopen_at)
                .where(pt.c.id == partition_id)
                .with_for_update()
            ).first()
            if row is None:
                raise PermanentError(f"partition {partition_id!r} not found")
            status = P(row.status)
            takeover = status == P.PROCESSING and (
                row.run_id == run_id or (row.last_heartbeat or 0) < now - stale_after_s
            )
            reopened = status == P.CLOSED and (row.reopen_at or 0) <= now
            if not (status == P.PENDING or takeover or reopened):
                return None
            check_partition(status, P.PROCESSING)
            res = conn.execute(
                pt.update()
                .where(pt.c.id == partition_id, pt.c.status == status)
                .values(**self._claim_values(owner, run_id, now))
            )
            if res.rowcount != 1:
                return None
        return self.partition(partition_id)

    # -- partitions: progress and outcome (all fenced by the claim token) --------------------------
    def _fenced(self, partition_id: str, token: int, to: PartitionStatus | None, **values: Any) -> None:
        pt = self.t.partition
        if to is not None:
            check_partition(P.PROCESSING, to)
            values["status"] = to
        with self.engine.begin() as conn:
            res = conn.execute(
                pt.update()
                .where(pt.c.id == partition_id, pt.c.claim_token == token, pt.c.status == P.PROCESSING)
                .values(**values)
            )
        if res.rowcount != 1:
            raise LockLost(f"partition {partition_id}: claim {token} is no longer the owner")

    def save_progress(
        self,
        partition_id: str,
        token: int,
        cursor: Sequence[Any] | None,
        success: int,
        failed: int,
        writer: str | None = None,
    ) -> None:
        """Record an acknowledged batch: move the cursor, add the counts, renew the heartbeat."""
        pt = self.t.partition
        values: dict[str, Any] = {
            "processed_count": pt.c.processed_count + success + failed,
            "success_count": pt.c.success_count + success,
            "failed_count": pt.c.failed_count + failed,
            "last_heartbeat": time.time(),
        }
        if cursor is not None:
            values["cursor"] = _dump_key(cursor)
        if writer is not None:
            values["writer"] = writer
        self._fenced(partition_id, token, None, **values)

    def heartbeat(self, partition_id: str, token: int) -> None:
        self._fenced(partition_id, token, None, last_heartbeat=time.time())

    def complete(self, partition_id: str, token: int) -> None:
        now = time.time()
        self._fenced(partition_id, token, P.COMPLETED, completed_at=now, last_heartbeat=now)

    def release(self, partition_id: str, token: int) -> None:
        """Give a partition back untouched by failure (graceful stop); its cursor is kept."""
        self._fenced(partition_id, token, P.PENDING, owner=None)

    def close_partition(self, partition_id: str, token: int, reopen_at: float) -> None:
        """Park a partition until *reopen_at* (Data Prepper's CLOSED), e.g. while its source is busy."""
        pt = self.t.partition
        self._fenced(partition_id, token, P.CLOSED, owner=None, reopen_at=reopen_at, closed_count=pt.c.closed_count + 1)

    def fail(self, partition_id: str, token: int, error: str, max_retries: int) -> PartitionStatus:
        """A failed attempt: back to PENDING while under *max_retries*, FAILED beyond it."""
        current = self.partition(partition_id)
        to = P.PENDING if current.retry_count < max_retries else P.FAILED
        pt = self.t.partition
        self._fenced(partition_id, token, to, owner=None, last_error=error[:4000], retry_count=pt.c.retry_count + 1)
        return to

    @rerun_on_conflict
    def reclaim_stale(self, job_id: str, stale_after_s: float, max_retries: int) -> tuple[int, int]:
        """Stale PROCESSING partitions go back to PENDING under the retry limit, else FAILED."""
        pt = self.t.partition
        cutoff = time.time() - stale_after_s
        stale = sa.and_(pt.c.job_id == job_id, pt.c.status == P.PROCESSING, pt.c.last_heartbeat < cutoff)
        with self.engine.begin() as conn:
            failed = conn.execute(
                pt.update()
                .where(stale, pt.c.retry_count >= max_retries)
                .values(status=P.FAILED, owner=None, last_error="heartbeat timed out; retries exhausted")
            ).rowcount
            reset = conn.execute(
                pt.update()
                .where(stale, pt.c.retry_count < max_retries)
                .values(
                    status=P.PENDING,
                    owner=None,
                    retry_count=pt.c.retry_count + 1,
                    last_error="heartbeat timed out; reclaimed",
                )
            ).rowcount
        return reset, failed

    def reset_orphans(self, job_id: str, live_run: str | None = None) -> int:
        """After a driver died: PROCESSING partitions of other runs go back to PENDING.

        Not counted as a retry: the partition did nothing wrong, its driver died.
        """
        pt = self.t.partition
        cond = sa.and_(pt.c.job_id == job_id, pt.c.status == P.PROCESSING)
        if live_run is not None:
            cond = sa.and_(cond, sa.or_(pt.c.run_id.is_(None), pt.c.run_id != live_run))
        with self.engine.begin() as conn:
            return int(conn.execute(pt.update().where(cond).values(status=P.PENDING, owner=None)).rowcount)

    def retry_failed(self, job_id: str) -> int:
        """A rerun of a failed job: failed partitions get a fresh set of retries."""
        pt = self.t.partition
        check_partition(P.FAILED, P.PENDING)
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    pt.update()
                    .where(pt.c.job_id == job_id, pt.c.status == P.FAILED)
                    .values(status=P.PENDING, retry_count=0)
                ).rowcount
            )

    # -- stats -------------------------------------------------------------------------------------
    def stats(self, job_id: str) -> dict[str, EntityStats]:
        pt = self.t.partition
        stmt = (
            sa.select(
                pt.c.entity,
                pt.c.status,
                sa.func.count(),
                sa.func.sum(pt.c.estimated_count),
                sa.func.sum(pt.c.processed_count),
                sa.func.sum(pt.c.success_count),
                sa.func.sum(pt.c.failed_count),
            )
            .where(pt.c.job_id == job_id)
            .group_by(pt.c.entity, pt.c.status)
        )
        acc: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for entity, status, n, est, proc, ok, bad in conn.execute(stmt):
                e = acc.setdefault(entity, {"total": 0, "processed": 0, "success": 0, "failed": 0, "partitions": {}})
                e["total"] += int(est or 0)
                e["processed"] += int(proc or 0)
                e["success"] += int(ok or 0)
                e["failed"] += int(bad or 0)
                e["partitions"][status] = int(n)
        return {k: EntityStats(k, **v) for k, v in sorted(acc.items())}

    def roll_up(self, job_id: str) -> dict[str, EntityStats]:
        """Copy the partition totals onto the job row (what `status` and the web page show)."""
        stats = self.stats(job_id)
        self.update_job(
            job_id,
            total_records=sum(s.total for s in stats.values()),
            processed_records=sum(s.processed for s in stats.values()),
            success_records=sum(s.success for s in stats.values()),
            failed_records=sum(s.failed for s in stats.values()),
            stats={k: s.to_dict() for k, s in stats.items()},
        )
        return stats
