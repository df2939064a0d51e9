"""Pure tests of fencing and recovery: the fenced alias swap at the target and the recovery decision.

Their store-backed counterparts run against every store in tests/coordination/.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.recovery import decide
from sparkindex.coordination.states import JobStatus
from sparkindex.errors import LockLost
from sparkindex.targets.tantivy.catalogue import AliasCatalogue

J = JobStatus


# -- fencing at the target -------------------------------------------------------------------------
def test_alias_swap_refuses_older_fence(tmp_path: Path) -> None:
    cat = AliasCatalogue(tmp_path)
    assert cat.get("a") is None
    cat.swap("a", "a_v1", None, fence=5)
    assert cat.get("a") == "a_v1"
    with pytest.raises(LockLost):
        cat.swap("a", "a_v2", "a_v1", fence=4)
    assert cat.get("a") == "a_v1"
    assert AliasCatalogue(tmp_path).get("a") == "a_v1", "the refused swap must not reach the file"
    cat.swap("a", "a_v2", "a_v1", fence=6)
    assert cat.get("a") == "a_v2"
    assert cat.read()["a"]["fence"] == 6
    assert cat.read()["a"]["history"] == ["a_v1"]
    # another alias has its own fence
    cat.swap("b", "b_v1", None, fence=1)
    assert cat.get("a") == "a_v2" and cat.get("b") == "b_v1"


# -- recovery decision ----------------------------------------------------------------------------
def fake_job(status: JobStatus, updated_at: float) -> JobRecord:
    return JobRecord(
        id="job-1",
        aliases=("products",),
        status=status,
        config={},
        targets={},
        run_id=None,
        total_records=0,
        processed_records=0,
        success_records=0,
        failed_records=0,
        created_at=updated_at,
        started_at=None,
        completed_at=None,
        updated_at=updated_at,
        error_message=None,
    )


NOW = 1_000_000.0
MAX_AGE = 3600.0

# What recovery.py's docstring promises for an orphan (no live holder) that is not too old.
FRESH_ORPHAN = {
    J.INITIALIZING: "fail",
    J.STOPPING: "stop",
    J.READY: "resume",
    J.RUNNING: "resume",
    J.COMPLETED: "none",
    J.COMPLETED_WITH_ERRORS: "none",
    J.STOPPED: "none",
    J.FAILED: "none",
}


@pytest.mark.parametrize("status", list(JobStatus), ids=str)
def test_decide_fresh_orphan(status: JobStatus) -> None:
    decision = decide(fake_job(status, NOW - 10), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert decision.action == FRESH_ORPHAN[status]
    assert decision.reason


@pytest.mark.parametrize("status", list(JobStatus), ids=str)
def test_decide_live_holder_means_hands_off(status: JobStatus) -> None:
    assert decide(fake_job(status, NOW - 10), holder_alive=True, now=NOW, max_age_s=MAX_AGE).action == "none"
    old = fake_job(status, NOW - 10 * MAX_AGE)
    assert decide(old, holder_alive=True, now=NOW, max_age_s=MAX_AGE).action == "none"


@pytest.mark.parametrize("status", [J.READY, J.RUNNING, J.STOPPED, J.FAILED], ids=str)
def test_decide_too_old_orphan_fails(status: JobStatus) -> None:
    decision = decide(fake_job(status, NOW - MAX_AGE - 1), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert decision.action == "fail"
    # just inside the age it is still resumed (or left for a rerun)
    inside = decide(fake_job(status, NOW - MAX_AGE + 1), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert inside.action == FRESH_ORPHAN[status]


@pytest.mark.parametrize("status", [J.INITIALIZING, J.STOPPING, J.COMPLETED, J.COMPLETED_WITH_ERRORS], ids=str)
def test_decide_age_does_not_override(status: JobStatus) -> None:
    decision = decide(fake_job(status, NOW - 10 * MAX_AGE), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert decision.action == FRESH_ORPHAN[status]


def test_decide_tolerates_clock_skew() -> None:
    """A job updated "in the future" (another host's clock runs ahead) is not too old."""
    job = dataclasses.replace(fake_job(J.RUNNING, NOW), updated_at=NOW + 5)
    assert decide(job, holder_alive=False, now=NOW, max_age_s=MAX_AGE).action == "resume"


def test_decide_resumable_only_for_resume_and_none_of_unfinished_jobs() -> None:
    assert decide(fake_job(J.RUNNING, NOW - 10), holder_alive=False, now=NOW, max_age_s=MAX_AGE).resumable
    assert decide(fake_job(J.FAILED, NOW - 10), holder_alive=False, now=NOW, max_age_s=MAX_AGE).resumable
    old_failed = decide(fake_job(J.FAILED, NOW - 2 * MAX_AGE), holder_alive=False, now=NOW, max_age_s=MAX_AGE)
    assert not old_failed.resumable and "recovery age" in old_failed.reason
    assert not decide(fake_job(J.COMPLETED, NOW), holder_alive=False, now=NOW, max_age_s=MAX_AGE).resumable


def test_decide_refuses_a_changed_fingerprint() -> None:
    job = dataclasses.replace(fake_job(J.RUNNING, NOW - 10), fingerprint="a")
    refused = decide(job, holder_alive=False, now=NOW, max_age_s=MAX_AGE, fingerprint="b")
    assert refused.action == "refuse" and "--new" in refused.reason
    assert decide(job, holder_alive=False, now=NOW, max_age_s=MAX_AGE, fingerprint="a").action == "resume"
    # jobs planned before fingerprints existed cannot be compared: resumed as before
    legacy = fake_job(J.RUNNING, NOW - 10)
    assert decide(legacy, holder_alive=False, now=NOW, max_age_s=MAX_AGE, fingerprint="b").action == "resume"
