"""Which job a reindex runs: an unfinished one of the same aliases resumed, or a new one planned.

A job may be resumed only when what decides its documents is unchanged (its fingerprint), its
index versions still exist, its catch-up position is still in the change log, and recovery finds
its last driver gone. Everything else is abandoned for good (FAILED, marked not resumable) and a
new job is planned: its versions created, its catch-up position recorded before any partition
reads a row, then its partitions.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkindex.config.model import Pipeline
from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.recovery import NOT_RESUMABLE, not_resumable, recover
from sparkindex.coordination.states import RESUMABLE_JOB_STATES, JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import ConfigError
from sparkindex.jobs.progress import ProgressListener
from sparkindex.sources.base import Source
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.sources.replica import NotThePrimarysReplica, ReplicaBehind
from sparkindex.targets.target import Target

if TYPE_CHECKING:
    from sparkindex.capture.catch_up import CatchUp

log = logging.getLogger(__name__)


class JobPlanner:
    """Resumes or plans the job of a reindex that holds every alias's lock."""

    def __init__(
        self,
        pipeline: Pipeline,
        aliases: list[str],
        store: CoordinationStore,
        target: Target,
        catch_up: CatchUp | None,
        progress: ProgressListener,
        *,
        new: bool,
        adopt: bool,
        before_reads: Callable[[], None] = lambda: None,
    ) -> None:
        self.pipeline = pipeline
        self.aliases = aliases
        self.store = store
        self.target = target
        self.catch_up = catch_up
        self.progress = progress
        #: ``reindex --new``: every unfinished job is abandoned
        self.new = new
        #: an index that bears an alias's name is replaced by the alias at the swap
        self.adopt = adopt
        #: called once P0 is recorded (or a job is resumed), before any row is read: a read
        #: replica's wait for the primary's position
        self.before_reads = before_reads

    def resume_or_plan(
        self, source: Source, plans: dict[str, Any], fingerprint: str, fence: dict[str, int]
    ) -> JobRecord:
        """The job to run: the first unfinished one that may be resumed, else a new one."""
        p, store, target = self.pipeline, self.store, self.target
        unfinished = store.job_rows.jobs(self.aliases, [*RESUMABLE_JOB_STATES, JobStatus.INITIALIZING])
        for old in unfinished:
            if self.new:
                self.abandon(old, "abandoned by reindex --new", fence)
                continue
            # We hold every alias lock, so whoever ran this job before is gone.
            decision = recover(
                store,
                old,
                holder_alive=False,
                max_age_s=p.job.recovery_max_age_s,
                fingerprint=fingerprint,
                fence=fence,
            )
            if decision.action == "refuse":
                raise ConfigError(f"{p.origin}: {decision.reason}")
            current = store.job_rows.job(old.id)
            if not decision.resumable:
                self.abandon(current, decision.reason, fence)  # failed by recovery just now, or before
                continue
            if current.status not in RESUMABLE_JOB_STATES:
                continue
            if not all(target.version_exists(ix) for ix in current.targets.values()):
                self.abandon(current, "its index versions are gone; starting afresh", fence)
                continue
            lost = self.catch_up.lost_log(old.id) if self.catch_up is not None else None
            if lost is not None:
                # what committed during the job is gone from the log: only a new snapshot has it
                reason = f"its catch-up position is gone from the change log ({lost}); starting afresh"
                log.warning("job %s cannot be resumed: %s", old.id, reason)
                self.abandon(current, reason, fence)
                continue
            if current.status in (JobStatus.STOPPED, JobStatus.FAILED):
                store.partition_resets.retry_failed(old.id)
                store.job_rows.transition_job(old.id, JobStatus.READY, fence=fence)
            self.before_reads()
            self.progress.phase(f"resuming job {old.id}")
            return store.job_rows.job(old.id)
        # a lagging read replica is refused before anything is created (waited for again below,
        # past P0, which is then a matter of milliseconds)
        self.before_reads()
        self.progress.phase("planning partitions")
        job = store.job_rows.create_job(
            self.aliases, {"aliases": self.aliases}, getpass.getuser(), fingerprint=fingerprint
        )
        targets = {
            a: target.create_version(a, m, plan.config.settings.to_target(), adopt=self.adopt)
            for a, (plan, m) in plans.items()
        }
        store.job_rows.update_job(job.id, targets=targets)
        try:
            if self.catch_up is not None:  # the log position is recorded before any partition reads a row
                self.catch_up.record_start(job.id, targets)
            self.before_reads()  # a read replica has replayed the primary's position (past P0) by now
        except (ReplicaBehind, NotThePrimarysReplica) as exc:
            self.withdraw(job.id, targets, str(exc), fence)
            raise
        specs = plan_partitions(
            source,
            [EntityPlanInput(plan.config, plan.table, plan.id_columns) for plan, _ in plans.values()],
            p.job,
        )
        store.partition_rows.add_partitions(job.id, specs)
        return store.job_rows.transition_job(job.id, JobStatus.READY, fence=fence)

    def withdraw(self, job_id: str, targets: dict[str, str], reason: str, fence: dict[str, int]) -> None:
        """A new job refused before its first read (the read replica did not reach P0): it
        leaves nothing behind, neither its slot and catch-up position, nor its empty versions,
        and it ends FAILED, never to be resumed (a later run starts afresh)."""
        store = self.store
        if self.catch_up is not None:
            self.catch_up.withdraw(job_id)
        for index in targets.values():
            try:
                self.target.delete_version(index)
            except Exception as exc:  # noqa: BLE001 - the refusal stands; gc deletes it later
                log.warning("could not delete version %s of the refused job %s: %s", index, job_id, exc)
            store.ledger.drop_versions(index)
        store.job_rows.update_job(job_id, targets={})
        store.job_rows.transition_job(job_id, JobStatus.FAILED, error=(NOT_RESUMABLE + reason)[:4000], fence=fence)

    def abandon(self, job: JobRecord, reason: str, fence: dict[str, int]) -> None:
        """*job* is never to be resumed: FAILED, its error saying so (recovery.NOT_RESUMABLE), its
        catch-up position forgotten."""
        store = self.store
        error = NOT_RESUMABLE + reason
        # its partitions go back even when it is marked already (a driver died between the mark
        # and this): we hold every alias lock, so whoever held them is gone
        store.partition_resets.reset_orphans(job.id, fence=fence)
        if job.status != JobStatus.FAILED:
            store.job_rows.transition_job(job.id, JobStatus.FAILED, error=error, fence=fence)
        elif not not_resumable(job):  # the mark, the failure it had, and its age kept
            error += f" (it had failed: {job.error_message or 'no error recorded'})"
            store.job_rows.update_job(job.id, error_message=error[:4000], updated_at=job.updated_at, fence=fence)
        if self.catch_up is not None:
            self.catch_up.abandon(job.id)
