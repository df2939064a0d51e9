"""Job rows: creation, reading, and the fenced transitions and updates a driver makes.

A transition is a conditional UPDATE on the state read in the same transaction, after
:func:`states.check_job` has approved the move; with a *fence* it is also conditional on the
driver's alias lock tokens, so a driver that lost its lock cannot move the job.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.coordination.base import Fence, StoreBase, alias_key, rerun_on_conflict
from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.states import JobStatus, check_job
from sparkindex.errors import LockLost, PermanentError

_FINAL = (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.FAILED, JobStatus.STOPPED)


class JobRows(StoreBase):
    def create_job(
        self,
        aliases: Sequence[str],
        config: dict[str, Any],
        created_by: str,
        *,
        fingerprint: str | None = None,
    ) -> JobRecord:
        """A new INITIALIZING job. *fingerprint* identifies the resolved plan and mappings, so a
        rerun with another config can refuse to resume it (:func:`recovery.decide`)."""
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
                    fingerprint=fingerprint,
                    created_by=created_by,
                    created_at=now,
                    updated_at=now,
                )
            )
        return self.job(job_id)

    @rerun_on_conflict
    def job(self, job_id: str) -> JobRecord:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.t.job).where(self.t.job.c.id == job_id)).first()
        if row is None:
            raise PermanentError(f"job {job_id!r} not found in the coordination store")
        return JobRecord.from_row(row)

    @rerun_on_conflict
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

    @rerun_on_conflict
    def transition_job(
        self,
        job_id: str,
        to: JobStatus,
        *,
        fence: Fence | None = None,
        error: str | None = None,
        **values: Any,
    ) -> JobRecord:
        """Move the job to *to*. With *fence*, only while the caller still holds those alias locks:
        otherwise :class:`LockLost` naming the job and the alias, and nothing is written."""
        jt = self.t.job
        now = time.time()
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(jt.c.status).where(jt.c.id == job_id)).first()
            if row is None:
                raise PermanentError(f"job {job_id!r} not found")
            check_job(row.status, to)
            extra: dict[str, Any] = {"status": to, "updated_at": now, **_encoded(values)}
            if to == JobStatus.RUNNING:
                extra.setdefault("started_at", now)
            if to in _FINAL:
                extra["completed_at"] = now
            if error is not None:
                extra["error_message"] = error
            res = conn.execute(
                jt.update()
                .where(jt.c.id == job_id, jt.c.status == row.status, *self.fence_conditions(fence))
                .values(**extra)
            )
            if res.rowcount != 1:
                self.check_fence(conn, fence, f"job {job_id} -> {to}")
                raise LockLost(f"job {job_id!r} changed state concurrently")
        return self.job(job_id)

    @rerun_on_conflict
    def update_job(self, job_id: str, *, fence: Fence | None = None, **values: Any) -> None:
        """Set job columns (``targets`` and ``stats`` as dicts); fenced like :meth:`transition_job`."""
        jt = self.t.job
        with self.engine.begin() as conn:
            res = conn.execute(
                jt.update()
                .where(jt.c.id == job_id, *self.fence_conditions(fence))
                .values(**{"updated_at": time.time(), **_encoded(values)})  # a caller's updated_at wins
            )
            if res.rowcount != 1 and fence:
                self.check_fence(conn, fence, f"job {job_id} update")


def _encoded(values: dict[str, Any]) -> dict[str, Any]:
    """Dict-valued fields as the JSON text columns that hold them."""
    out = dict(values)
    if "targets" in out:
        out["targets_json"] = orjson.dumps(out.pop("targets")).decode()
    if "stats" in out:
        out["stats_json"] = orjson.dumps(out.pop("stats")).decode()
    return out
