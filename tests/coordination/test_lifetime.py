"""The store is one object over its concepts, and a context manager that closes every
connection it holds (pooled, autocommit, and the claimers' direct ones) at the end of its block."""

from __future__ import annotations

import os

from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.verify_runs import COUNTS, VerifyRun
from tests.coordination.helpers import new_job


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_store_closes_every_connection_at_the_end_of_its_block(store_url: tuple[str, str]) -> None:
    CoordinationStore(*store_url).close()  # the schema exists: what follows only reads and writes rows
    before = open_fds()
    with CoordinationStore(*store_url) as store:
        _, [pid] = new_job(store, 1)
        rec = store.partition_rows.claim(pid, "owner", "run", 60.0)  # PostgreSQL: a direct connection
        assert rec is not None
        store.partition_rows.complete(pid, rec.claim_token, None, 1, 0)  # the autocommit engine
        used = open_fds()
    if not store_url[0].startswith("sqlite"):  # SQLite's store connects per statement: it holds none between them
        assert used > before, "the test must see the connections it expects to be closed"
    assert open_fds() == before, f"{before} descriptors before the block, {used} in it, {open_fds()} after"
    store.close()  # closing again does nothing more
    assert open_fds() == before


def test_every_concept_is_an_attribute_over_the_stores_own_engine(store_url: tuple[str, str]) -> None:
    with CoordinationStore(*store_url) as store:
        concepts = [store.job_rows, store.partition_rows, store.partition_resets, store.partition_stats]
        concepts += [store.sync_events, store.verify_runs, store.locks, store.dead_letters, store.offsets]
        assert all(c.engine is store.engine for c in concepts)
        store.sync_events.record("g", "source", "the log could not be read")
        assert [(e.group, e.kind, e.count) for e in store.sync_events.events("g")] == [("g", "source", 1)]
        run = VerifyRun(
            "r1",
            "products",
            "products_v1",
            "cli",
            False,
            "clean",
            **dict.fromkeys(COUNTS, 0),
            started_at=1.0,
            finished_at=2.0,
        )
        store.verify_runs.record([run])
        latest = store.verify_runs.latest("products")
        assert latest is not None and latest.run_id == "r1"
        job_id, _ = new_job(store, 2)
        assert store.roll_up(job_id)["products"].total == 20  # partition totals onto the job row
        assert store.job_rows.job(job_id).total_records == 20
