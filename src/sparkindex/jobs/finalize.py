"""Finishing a reindex: only a whole, counted index behind a fenced compare-and-swap goes live.

Readers of an alias must never see a partial index. So before any alias moves:
every partition is COMPLETED, the version's settings are restored, and the number of documents
the index holds equals the number its partitions acknowledged. More means documents nobody
acknowledged: duplicates, or writes that landed after their worker lost its claim. (A write that
landed before its worker died unacknowledged is no such document: where a target is written in
place, the redo deletes what the dead attempt recorded in the write-ahead log before sending it,
:mod:`sparkindex.worker.in_place`, so a row deleted from the source meanwhile leaves nothing
behind; staged targets never adopt an unacknowledged stage.) Fewer means writes lost, or
partitions that overlapped (two upserts of one id count twice). Either way the job fails, naming
both counts, and the alias stays where it was. The swap itself is a compare-and-swap on the
index the alias pointed at when this driver took its lock, carrying the lock's fencing token;
every attempt, and how it ended, is kept in the store's fence log
(:mod:`sparkindex.coordination.swap_log`).

A job that failed after its swap (during the hand-over to live syncs, or pruning) is finished by
a rerun: an alias that already points at the job's version is not counted or swapped again
(live syncs may have written into it since), and what followed the swap is done.
"""

from __future__ import annotations

from typing import Any

from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.targets.writer import TargetWriter

P = PartitionStatus


def adopt_completed_stages(
    store: CoordinationStore, target: TargetWriter, job_id: str, targets: dict[str, str]
) -> None:
    """Make the stages the store recorded for the completed partitions part of the new versions
    (targets that stage writes; see :meth:`TargetWriter.open_stage`); any other stage is thrown away."""
    completed = store.partition_rows.partitions(job_id, [P.COMPLETED])
    for alias, index in targets.items():
        target.adopt_stages(index, {name for p in completed if p.entity == alias for name in p.stage_names})


def finalize_job(
    store: CoordinationStore,
    target: TargetWriter,
    job_id: str,
    fence: dict[str, int],
    previous: dict[str, str | None],
    keep_versions: int,
    catch_up: Any = None,
) -> JobRecord:
    """*catch_up* (:class:`sparkindex.capture.catch_up.CatchUp`): replays the changes committed
    during the job into the new versions before the swap, and hands the aliases to live syncs
    (or hands them the position recorded before planning)."""
    stats = store.roll_up(job_id, fence=fence)
    job = store.job_rows.job(job_id)
    if job.status == JobStatus.STOPPING:
        store.partition_resets.reset_orphans(job_id, fence=fence)
        return store.job_rows.transition_job(job_id, JobStatus.STOPPED, error="stopped by request", fence=fence)
    unfinished = {k: v for k, v in stats.items() if not v.done}
    failed_parts = sum(s.partitions.get(P.FAILED, 0) for s in stats.values())
    if unfinished or failed_parts:
        store.partition_resets.reset_orphans(job_id, fence=fence)
        detail = ", ".join(f"{k}: {v.partitions}" for k, v in stats.items())
        return store.job_rows.transition_job(
            job_id,
            JobStatus.FAILED,
            error=f"{failed_parts} partition(s) failed or left unfinished ({detail}); rerun to resume",
            fence=fence,
        )
    # A rerun after a failure that followed the swap: the aliases that already point at this
    # job's versions were counted before they moved (and live syncs may write into them since);
    # only what came after the swap (the hand-over, pruning) is left to do for them.
    swapped = {a for a, index in job.targets.items() if previous.get(a) == index}
    recorded = catch_up.swapped(job_id) if catch_up is not None else {}
    moved = [a for a, index in recorded.items() if previous.get(a) != index]
    if moved:
        return store.job_rows.transition_job(
            job_id,
            JobStatus.FAILED,
            error=f"alias(es) {', '.join(moved)} moved since this job swapped them; not swapping them back "
            "(rerun with --new)",
            fence=fence,
        )
    fresh = {a: index for a, index in job.targets.items() if a not in swapped}
    mismatches = []
    adopt_completed_stages(store, target, job_id, fresh)
    for alias, index in fresh.items():
        target.finish_version(index)
        if catch_up is not None and catch_up.wrote(job_id, alias):
            continue  # counted before an earlier run's catch-up wrote changes into it
        held, acknowledged = target.count(index), stats[alias].success if alias in stats else 0
        if held != acknowledged:
            mismatches.append(
                f"{index} holds {held:,} documents but its partitions acknowledged {acknowledged:,}"
                + (
                    " (documents nobody acknowledged: duplicates, or writes landed after their worker lost its claim)"
                    if held > acknowledged
                    else " (lost writes, or overlapping partitions)"
                )
            )
    if mismatches:
        return store.job_rows.transition_job(
            job_id,
            JobStatus.FAILED,
            error="alias not swapped: "
            + "; ".join(mismatches)
            + "; `sparkindex verify` names the ids; rerun with --new after fixing the cause",
            fence=fence,
        )

    def swap(alias: str, index: str) -> None:
        # Every attempt goes into the fence log first, its outcome after (coordination/swap_log.py);
        # catch-up's hand-over swaps with this very function.
        with store.swap_log.attempt(alias, index, previous.get(alias), fence[alias], job_id):
            store.locks.check(alias, fence[alias])
            target.swap(alias, index, previous.get(alias), fence[alias])

    if catch_up is None:
        for alias, index in fresh.items():
            swap(alias, index)
    else:  # holds released in its finally, whatever fails
        catch_up.swap_and_hand_over(job_id, job.targets, fresh, swap, fence)
    for alias in job.targets:
        for pruned in target.prune_versions(alias, keep_versions):
            store.ledger.drop_versions(pruned)  # the version ledger's rows go with their version
    failed_docs = store.dead_letters.count(job_id)
    status = JobStatus.COMPLETED_WITH_ERRORS if failed_docs else JobStatus.COMPLETED
    return store.job_rows.transition_job(job_id, status, fence=fence)
