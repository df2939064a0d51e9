"""The version ledger (``si_doc_version``) shrinks with the index versions it belongs to.

A sync into a target that does not compare versions (Tantivy) records per physical index and
document the newest version it wrote. Those rows are worth nothing once their index is gone, so
whoever deletes a version deletes them too: finalize when it prunes versions beyond
``keep_versions`` after a swap, and ``gc``. Real parts: the SQLite shop, the Tantivy target, the
real PartitionWorker and finalize; gc on every store kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.jobs.finalize import finalize_job
from sparkindex.jobs.gc import collect_garbage
from sparkindex.resources import open_store, open_target
from tests.e2e.shop import make_shop
from tests.e2e.test_gc_retention import DAY, MAPPING, pipeline_on
from tests.e2e.test_unacknowledged_writes import ALIAS, plan_job, run_the_rest
from tests.jobs.planting import tantivy

VERSIONS = {"1": 3, "2": 5, "3": 8}


def ledger(store: CoordinationStore) -> dict[str, int]:
    """Ledger rows per index."""
    t = store.t.doc_version
    with store.engine.connect() as conn:
        return {
            name: int(n)
            for name, n in conn.execute(sa.select(t.c.index_name, sa.func.count()).group_by(t.c.index_name))
        }


@pytest.mark.slow
def test_finalize_drops_the_ledger_rows_of_the_versions_it_prunes(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=200, partition_size=100)
    with open_target(pipeline) as target:
        store, job_id, first, fence = plan_job(pipeline, target)
        with store:
            run_the_rest(pipeline, store, job_id, first, target)
            completed = finalize_job(store, target, job_id, fence, {ALIAS: None}, keep_versions=1)
            assert completed.status == JobStatus.COMPLETED
            store.locks.release(ALIAS, fence[ALIAS])
            store.ledger.record_versions(first, VERSIONS)  # a sync applied changes to the live version
            store.ledger.record_versions("elsewhere_v1", VERSIONS)  # another alias's version: not ours to drop

        store, job_id, second, fence = plan_job(pipeline, target)
        with store:
            run_the_rest(pipeline, store, job_id, second, target)
            store.ledger.record_versions(second, {"1": 9})  # the catch-up wrote into the new version
            assert ledger(store) == {first: 3, second: 1, "elsewhere_v1": 3}
            completed = finalize_job(store, target, job_id, fence, {ALIAS: first}, keep_versions=1)
            assert completed.status == JobStatus.COMPLETED

            assert target.list_versions(ALIAS) == [second], "the first version was pruned"
            assert ledger(store) == {second: 1, "elsewhere_v1": 3}, "its ledger rows went with it"
            assert store.ledger.versions(second, ["1"]) == {"1": 9}


def test_gc_drops_the_ledger_rows_of_the_versions_it_deletes(tmp_path: Path, store_url: tuple[str, str]) -> None:
    pipeline = pipeline_on(tmp_path, *store_url)  # keep_versions: 1
    with open_store(pipeline) as store, tantivy(pipeline) as target:
        v1, v2, v3 = (target.create_version("products", MAPPING) for _ in range(3))
        target.swap("products", v1, None)  # the alias stays on the oldest: v2 is the one gc deletes
        for index in (v1, v2, v3):
            store.ledger.record_versions(index, VERSIONS)

        preview = collect_garbage(pipeline, 30 * DAY, dry_run=True)
        assert preview.versions_deleted == [v2]
        assert ledger(store) == {v1: 3, v2: 3, v3: 3}, "a dry run deletes nothing"
        report = collect_garbage(pipeline, 30 * DAY)
        assert report.versions_deleted == [v2] and target.list_versions("products") == [v1, v3]
        assert ledger(store) == {v1: 3, v3: 3}
        assert store.ledger.versions(v1, list(VERSIONS)) == VERSIONS
