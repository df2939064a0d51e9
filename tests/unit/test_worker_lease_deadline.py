"""A takeover noticed by an attempt ends the deadline its bulks write under at once (found in
review: the lease's deadline ignored a noticed takeover, so the chunks of a bulk already on its way
were still sent to an index the new owner was writing). Real SQLite store, no target needed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.coordination.helpers import new_job

from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LeaseExpired
from sparkindex.targets.write_deadline import write_budget_s, writes_until
from sparkindex.worker.lease import Lease


def test_a_noticed_takeover_ends_the_write_deadline(tmp_path: Path) -> None:
    store = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "w", "run-1", 60)
    assert rec is not None
    lease = Lease(store, rec, 60.0, claimed_at=time.monotonic())
    with writes_until(lease.valid_until):
        left = write_budget_s("a chunk")
        assert left is not None and 40 < left <= 45  # 0.75 of the 60 s claim timeout
        lease.lost = "partition taken over by claim 2"
        with pytest.raises(LeaseExpired, match="ran out"):
            write_budget_s("the next chunk")
    store.close()
