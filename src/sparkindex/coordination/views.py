"""Read-only views of the coordination store for the progress server, its page and its metrics.

The server reads every two seconds while workers claim and save progress. On SQLite the store's
own engine opens every transaction with ``BEGIN IMMEDIATE`` (the write lock), so reading through
it would queue the server behind the workers and the workers behind the server; these views use a
separate engine whose reads take no write lock (WAL lets them run beside the writers). On a
server database they use autocommit connections: one round trip per query, no snapshot held.
The store's concept modules are reused over that engine (jobs, stats, locks, dead letters,
consumer offsets, verify runs); what is new here is what only a watcher needs (partition timings,
totals across jobs, filters, the metrics aggregates).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.coordination.dead_letters import DeadLetterStore
from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.jobs import JobRows
from sparkindex.coordination.latency import LatencyHistogram
from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.offsets import ConsumerOffsetRows, GroupOffset
from sparkindex.coordination.records import DeadLetter, EntityStats, JobRecord, LockRecord
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.stats import PartitionStats
from sparkindex.coordination.tables import make_tables
from sparkindex.coordination.verify_runs import VerifyRuns
from sparkindex.errors import PermanentError
from sparkindex.keys import load_key

#: Jobs a watcher shows as live: they hold (or are about to hold) workers.
ACTIVE_JOB_STATES = (JobStatus.INITIALIZING, JobStatus.READY, JobStatus.RUNNING, JobStatus.STOPPING)

#: Upper bounds (seconds) of the partition duration histogram.
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: bulk latency is reported over the partitions of this many most recent jobs
LATENCY_JOBS = 50


def read_engine(url: str) -> Engine:
    """An engine for reads only: see the module docstring for why it is not the store's."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 30}, poolclass=sa.pool.NullPool)

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA query_only=ON")
            cur.close()

        return engine
    return make_engine(url, autocommit=True)


def display_key(text: str | None) -> list[Any] | None:
    """A stored key (cursor, range bound) as plain JSON values for people: Decimal and bytes as text."""
    key = load_key(text)
    if key is None:
        return None

    def plain(value: Any) -> Any:
        if isinstance(value, decimal.Decimal):
            return str(value)
        if isinstance(value, bytes):
            return "base64:" + base64.b64encode(value).decode("ascii")
        if isinstance(value, dt.timedelta):
            return value.total_seconds()
        if isinstance(value, dt.date | dt.time):
            return value.isoformat()
        return value

    return [plain(v) for v in key]


@dataclass(frozen=True)
class PartitionView:
    """One partition as the page's grid and the partitions endpoint show it."""

    id: str
    entity: str
    index: int
    status: str
    owner: str | None
    writer: str | None
    range_start: list[Any] | None
    range_end: list[Any] | None
    cursor: list[Any] | None
    estimated: int
    processed: int
    success: int
    failed: int
    claims: int
    retries: int
    closed_count: int
    last_error: str | None
    claimed_at: float | None
    started_at: float | None
    completed_at: float | None
    last_heartbeat: float | None
    reopen_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobTotals:
    """A job's partition aggregates (the list view: one query for many jobs)."""

    total: int = 0
    processed: int = 0
    success: int = 0
    failed: int = 0
    partitions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything ``/metrics`` exports, read in a handful of queries at scrape time."""

    jobs_by_status: dict[str, int]
    partitions_by_status: dict[str, int]
    partitions_created: int
    claims: int
    closed: int
    retries: int
    documents: dict[str, tuple[int, int]]  # entity -> (indexed, failed)
    dead_letters: dict[tuple[str, str], int]  # (alias, error class) -> count
    durations: list[int]  # cumulative counts per DURATION_BUCKETS bound, then +Inf
    duration_sum: float
    active: list[tuple[JobRecord, dict[str, EntityStats]]]
    #: bulk requests of the recent jobs' partitions, merged (:mod:`sparkindex.coordination.latency`)
    bulk_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    #: fenced partition updates refused (another claim owned it), and partitions not found
    update_errors: int = 0
    not_found: int = 0


@dataclass(frozen=True)
class SyncConsumer:
    """A change-capture consumer group's position on one alias, as the page and metrics show it."""

    group: str
    alias: str | None
    position: str | None
    updated_at: float | None
    lag_s: float | None
    index: str | None = None
    applied: float | None = None
    deleted: float | None = None
    retained_bytes: float | None = None

    @classmethod
    def of(cls, o: GroupOffset) -> SyncConsumer:
        return cls(
            group=o.group,
            alias=o.alias,
            position=str(o.position),
            updated_at=o.updated_at,
            lag_s=o.lag_s,
            index=o.index,
            applied=float(o.applied),
            deleted=float(o.deleted),
            retained_bytes=None if o.retained_bytes is None else float(o.retained_bytes),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StoreViews:
    """Read-only queries over one coordination store (URL and table prefix as the pipeline names them)."""

    def __init__(self, url: str, prefix: str = "") -> None:
        self.engine = read_engine(url)
        self.t = make_tables(prefix)
        self.prefix = prefix
        self._jobs = JobRows(self.engine, self.t)
        self._stats = PartitionStats(self.engine, self.t)
        self.dead_letter_rows = DeadLetterStore(self.engine, self.t.dead_letter, self.t.dead_letter_resolved)
        self._locks = LockManager(self.engine, self.t.lock)
        self._offsets = ConsumerOffsetRows(self.engine, self.t)
        self._verify_runs = VerifyRuns(self)

    def close(self) -> None:
        self.engine.dispose()

    # -- jobs --------------------------------------------------------------------------------------
    @rerun_on_conflict
    def jobs(
        self, limit: int = 50, statuses: Sequence[str] | None = None, finished_since: float | None = None
    ) -> list[JobRecord]:
        """Newest first. *finished_since*: also jobs that ended at or after that time (a watcher's
        last look), so a job that finished between two looks is reported once in its final state."""
        jt = self.t.job
        stmt = sa.select(jt).order_by(jt.c.created_at.desc()).limit(limit)
        conds: list[sa.ColumnElement[bool]] = []
        if statuses is not None:
            conds.append(jt.c.status.in_(list(statuses)))
        if finished_since is not None:
            conds.append(jt.c.completed_at >= finished_since)
        if conds:
            stmt = stmt.where(sa.or_(*conds))
        with self.engine.connect() as conn:
            return [JobRecord.from_row(r) for r in conn.execute(stmt)]

    def active_jobs(self, finished_since: float | None = None) -> list[JobRecord]:
        return self.jobs(limit=200, statuses=[str(s) for s in ACTIVE_JOB_STATES], finished_since=finished_since)

    def job(self, job_id: str) -> JobRecord | None:
        try:
            return self._jobs.job(job_id)
        except PermanentError:  # the one it raises: not found
            return None

    def stats(self, job_id: str) -> dict[str, EntityStats]:
        return self._stats.stats(job_id)

    def lock(self, alias: str) -> LockRecord | None:
        """The alias's lock row (a live driver holds it until ``expires_at``)."""
        return self._locks.get(alias)

    @rerun_on_conflict
    def totals(self, job_ids: Sequence[str]) -> dict[str, JobTotals]:
        """Aggregates of many jobs' partitions: one query for the counts, one for the states."""
        if not job_ids:
            return {}
        pt = self.t.partition
        mine = pt.c.job_id.in_(list(job_ids))
        sums = [
            sa.func.sum(c) for c in (pt.c.estimated_count, pt.c.processed_count, pt.c.success_count, pt.c.failed_count)
        ]
        counts = sa.select(pt.c.job_id, *sums).where(mine).group_by(pt.c.job_id)
        states = sa.select(pt.c.job_id, pt.c.status, sa.func.count()).where(mine).group_by(pt.c.job_id, pt.c.status)
        by_state: dict[str, dict[str, int]] = {}
        with self.engine.connect() as conn:
            for job_id, status, n in conn.execute(states):
                by_state.setdefault(job_id, {})[status] = int(n)
            return {
                job_id: JobTotals(int(est or 0), int(done or 0), int(ok or 0), int(bad or 0), by_state.get(job_id, {}))
                for job_id, est, done, ok, bad in conn.execute(counts).tuples()
            }

    # -- partitions --------------------------------------------------------------------------------
    @rerun_on_conflict
    def partitions(
        self, job_id: str, status: str | None = None, entity: str | None = None, limit: int | None = None
    ) -> list[PartitionView]:
        """A job's partitions in planning order (entity, index): the grid keeps its layout as states change."""
        pt = self.t.partition
        stmt = sa.select(pt).where(pt.c.job_id == job_id).order_by(pt.c.entity, pt.c.partition_index)
        if status is not None:
            stmt = stmt.where(pt.c.status == status)
        if entity is not None:
            stmt = stmt.where(pt.c.entity == entity)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.engine.connect() as conn:
            return [_partition_view(r._mapping) for r in conn.execute(stmt)]

    # -- dead letters ------------------------------------------------------------------------------
    @rerun_on_conflict
    def dead_letters(
        self,
        alias: str | None = None,
        error_class: str | None = None,
        job_id: str | None = None,
        limit: int = 100,
    ) -> list[DeadLetter]:
        t = self.t.dead_letter
        stmt = sa.select(*(t.c[n] for n in DeadLetter.__dataclass_fields__)).order_by(t.c.last_seen.desc())
        for column, value in (("alias", alias), ("error_class", error_class), ("job_id", job_id)):
            if value is not None:
                stmt = stmt.where(t.c[column] == value)
        with self.engine.connect() as conn:
            return [DeadLetter(**r._mapping) for r in conn.execute(stmt.limit(limit))]

    def dead_letter_total(self, job_id: str) -> int:
        return self.dead_letter_rows.count(job_id)

    @rerun_on_conflict
    def dead_letter_counts(self, job_id: str | None = None) -> dict[tuple[str, str], int]:
        """(alias, error class) -> documents, for the filters on the page and the metrics."""
        t = self.t.dead_letter
        stmt = sa.select(t.c.alias, t.c.error_class, sa.func.count()).group_by(t.c.alias, t.c.error_class)
        if job_id is not None:
            stmt = stmt.where(t.c.job_id == job_id)
        with self.engine.connect() as conn:
            return {(a, c): int(n) for a, c, n in conn.execute(stmt)}

    # -- metrics -----------------------------------------------------------------------------------
    @rerun_on_conflict
    def metrics(self) -> MetricsSnapshot:
        jt, pt = self.t.job, self.t.partition
        with self.engine.connect() as conn:
            jobs = {s: int(n) for s, n in conn.execute(sa.select(jt.c.status, sa.func.count()).group_by(jt.c.status))}
            parts = {s: int(n) for s, n in conn.execute(sa.select(pt.c.status, sa.func.count()).group_by(pt.c.status))}
            created, claims, closed, retries, update_errors = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.sum(pt.c.claims),
                    sa.func.sum(pt.c.closed_count),
                    sa.func.sum(pt.c.retry_count),
                    sa.func.sum(pt.c.update_errors),
                )
            ).one()
            not_found = conn.execute(sa.select(sa.func.sum(jt.c.partition_not_found))).scalar()
            docs = {
                e: (int(ok or 0), int(bad or 0))
                for e, ok, bad in conn.execute(
                    sa.select(pt.c.entity, sa.func.sum(pt.c.success_count), sa.func.sum(pt.c.failed_count)).group_by(
                        pt.c.entity
                    )
                )
            }
            took = pt.c.completed_at - pt.c.started_at
            finished = sa.and_(pt.c.status == "COMPLETED", pt.c.started_at.is_not(None), pt.c.completed_at.is_not(None))
            row = conn.execute(
                sa.select(
                    *(sa.func.sum(sa.case((sa.and_(finished, took <= b), 1), else_=0)) for b in DURATION_BUCKETS),
                    sa.func.sum(sa.case((finished, 1), else_=0)),
                    sa.func.sum(sa.case((finished, took), else_=0.0)),
                )
            ).one()
            # two queries: MySQL/MariaDB refuse LIMIT inside an IN subquery
            recent = list(conn.scalars(sa.select(jt.c.id).order_by(jt.c.created_at.desc()).limit(LATENCY_JOBS)))
            latency = LatencyHistogram()
            for (text,) in conn.execute(
                sa.select(pt.c.bulk_latency).where(pt.c.bulk_latency.is_not(None), pt.c.job_id.in_(recent))
            ):
                latency.merge(LatencyHistogram.from_json(text))
        active = [(job, self.stats(job.id)) for job in self.active_jobs()]
        return MetricsSnapshot(
            bulk_latency=latency,
            jobs_by_status=jobs,
            partitions_by_status=parts,
            partitions_created=int(created or 0),
            claims=int(claims or 0),
            closed=int(closed or 0),
            retries=int(retries or 0),
            update_errors=int(update_errors or 0),
            not_found=int(not_found or 0),
            documents=docs,
            dead_letters=self.dead_letter_counts(),
            durations=[int(v or 0) for v in row[:-1]],
            duration_sum=float(row[-1] or 0.0),
            active=active,
        )

    # -- change capture and verify runs -------------------------------------------------------------
    def sync_consumers(self) -> list[SyncConsumer]:
        """Consumer groups with their position and lag (``sync.offsets: store``); empty while no
        sync has saved one."""
        return sorted(map(SyncConsumer.of, self._offsets.every_group()), key=lambda c: (c.group, c.alias or ""))

    def verify_runs(self) -> list[dict[str, Any]]:
        """The newest verify run of each alias (whoever ran it: CLI, server, sync's schedule), its
        report left out; empty while no verify has recorded one."""
        return [
            {k: v for k, v in run.to_dict().items() if k != "report"} for run in self._verify_runs.newest_per_alias()
        ]


def _partition_view(m: Any) -> PartitionView:
    return PartitionView(
        id=m["id"],
        entity=m["entity"],
        index=int(m["partition_index"]),
        status=m["status"],
        owner=m["owner"],
        writer=m["writer"],
        range_start=display_key(m["range_start"]),
        range_end=display_key(m["range_end"]),
        cursor=display_key(m["cursor"]),
        estimated=int(m["estimated_count"] or 0),
        processed=int(m["processed_count"] or 0),
        success=int(m["success_count"] or 0),
        failed=int(m["failed_count"] or 0),
        claims=int(m["claims"] or 0),
        retries=int(m["retry_count"] or 0),
        closed_count=int(m["closed_count"] or 0),
        last_error=m["last_error"],
        claimed_at=m["claimed_at"],
        started_at=m["started_at"],
        completed_at=m["completed_at"],
        last_heartbeat=m["last_heartbeat"],
        reopen_at=m["reopen_at"],
    )
