"""finalize records every swap attempt in the fence log (coordination/swap_log.py), moved or refused.

Real parts: the SQLite shop and store, the embedded Tantivy target, the real PartitionWorker and
finalize. (The catch-up's swaps go through the same closure: see
tests/e2e/test_unacknowledged_writes.py, whose PostgreSQL test checks its attempt.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.swap_log import MOVED, REFUSED, stale_moves
from sparkindex.errors import LockLost
from sparkindex.jobs.finalize import finalize_job
from sparkindex.resources import open_target
from tests.e2e.shop import make_shop
from tests.e2e.test_unacknowledged_writes import ALIAS, plan_job, run_the_rest

pytestmark = pytest.mark.slow


def test_finalize_logs_the_move_and_the_refusal_of_a_stale_fence(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=300, partition_size=100)
    with open_target(pipeline) as target:
        store, first_job, first, fence = plan_job(pipeline, target)
        with store:
            run_the_rest(pipeline, store, first_job, first, target)
            done = finalize_job(store, target, first_job, fence, {ALIAS: None}, keep_versions=2)
            assert done.status == JobStatus.COMPLETED, done.error_message
            store.locks.release(ALIAS, fence[ALIAS])

        # The second job's driver is overtaken after its count check: a newer holder's token reached
        # the target (the store's lock row still carries the old one), so the target refuses it.
        store, second_job, second, fence2 = plan_job(pipeline, target)
        with store:
            assert fence2[ALIAS] == fence[ALIAS] + 1
            run_the_rest(pipeline, store, second_job, second, target)
            target.observe_fence(ALIAS, fence2[ALIAS] + 1)
            with pytest.raises(LockLost, match=f"fencing token {fence2[ALIAS]} is older"):
                finalize_job(store, target, second_job, fence2, {ALIAS: first}, keep_versions=2)
            assert target.alias_target(ALIAS) == first

            moved, refused = store.swap_log.attempts(ALIAS)
            assert (moved.index, moved.expected_previous, moved.fence, moved.job_id, moved.outcome) == (
                first,
                None,
                fence[ALIAS],
                first_job,
                MOVED,
            )
            assert moved.lock_token == fence[ALIAS]
            assert (refused.index, refused.expected_previous, refused.fence, refused.job_id, refused.outcome) == (
                second,
                first,
                fence2[ALIAS],
                second_job,
                REFUSED,
            )
            assert refused.detail is not None and f"fencing token {fence2[ALIAS]} is older" in refused.detail
            assert stale_moves(store.swap_log.attempts()) == []
