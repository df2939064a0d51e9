"""A rebuild whose catch-up lost its log is started afresh by the next ``reindex``, not resumed
for ever (found by the chaos campaign: binlogs purged while a rebuild ran; every
rerun resumed the job, its catch-up refused the same gap, and the rebuild never finished).

What committed while the job ran is only in the log its catch-up reads; once that log is gone
(binlogs purged past its GTID, its slot dropped) no rerun of that job can make its new versions
whole. The next run says why and starts a new job with a new snapshot.

Real parts: PostgreSQL as source and store (the catch-up's slot dropped by hand, as an
administrator would), osmem-server (an OpenSearch TEST DOUBLE) as target, the ``sparkindex``
command.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from sparkindex.capture.catch_up import CatchUp
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.planning import resolve_plans
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.verify.local import verify_alias
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop
from tests.e2e.test_unacknowledged_writes import ALIAS, plan_job
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)
from tests.support.osmem import OsmemCluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], osmem_cluster: OsmemCluster) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=250, target=osmem_cluster.opensearch_url)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def _reindex(cli: Path, shop: Shop) -> None:
    done = subprocess.run(
        [str(cli), "reindex", "-c", str(shop.pipeline.base_dir / "pipeline.yaml"), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert orjson.loads(done.stdout.strip().splitlines()[-1]), done.stdout


@pytest.mark.parametrize("left", ["killed", "failed"])
def test_a_rebuild_whose_catch_up_lost_its_log_starts_afresh(shop: Shop, cli: Path, spark: Any, left: str) -> None:
    """*left*: the job's driver was killed (RUNNING), or a run already failed on the gap (FAILED)."""
    pipeline = shop.pipeline
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    source = open_source(pipeline.source_url())
    catch_up = CatchUp(
        pipeline,
        source,
        CoordinationStore(pipeline.coordination_url()),
        [ALIAS],
        lambda: spark,
        job_plans(pipeline, source),
    )
    store, job_id, index, fence = plan_job(pipeline, target, catch_up)
    assert catch_up.active(job_id), "a sync section: the job records where its catch-up starts"
    if left == "failed":
        store.job_rows.transition_job(job_id, JobStatus.FAILED, error="the change log has a gap", fence=fence)
    store.locks.release(ALIAS, fence[ALIAS])  # its driver died here

    # what commits now is only in the job's log; then an administrator drops the job's slot
    shop.sql("DELETE FROM reviews WHERE product_id = 7", "DELETE FROM products WHERE id = 7")
    database = sa.make_url(shop.url).database
    with shop.engine().connect() as conn:
        slots = (
            conn.execute(sa.text("SELECT slot_name FROM pg_replication_slots WHERE database = :db"), {"db": database})
            .scalars()
            .all()
        )
        assert len(slots) == 1, slots
        conn.execute(sa.text("SELECT pg_drop_replication_slot(:s)"), {"s": slots[0]})

    _reindex(cli, shop)

    old = store.job_rows.job(job_id)
    assert old.status == JobStatus.FAILED and "catch-up position is gone" in (old.error_message or ""), old
    [new] = [j for j in store.job_rows.jobs([ALIAS]) if j.id != job_id]
    assert new.status == JobStatus.COMPLETED and target.alias_target(ALIAS) == new.targets[ALIAS] != index
    _reindex(cli, shop)  # and no later run resumes the abandoned job
    assert store.job_rows.job(job_id).status == JobStatus.FAILED and len(store.job_rows.jobs([ALIAS])) == 3
    plan, _ = resolve_plans(pipeline, source, [ALIAS])[ALIAS]
    result = verify_alias(source, target, plan)
    assert (result.missing, result.extra, result.stale, result.duplicates) == (0, 0, 0, 0), result.samples


def test_a_rebuild_recovery_fails_forgets_its_catch_up(shop: Shop, cli: Path, spark: Any) -> None:
    """A job idle beyond ``job.recovery_max_age_s`` is failed by recovery and never resumed: its
    catch-up position must go with it, or the change log behind it (a slot's WAL, a binlog
    position other runs keep) is held for a job that will never read it."""
    pipeline = shop.pipeline
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    source = open_source(pipeline.source_url())
    catch_up = CatchUp(
        pipeline,
        source,
        CoordinationStore(pipeline.coordination_url()),
        [ALIAS],
        lambda: spark,
        job_plans(pipeline, source),
    )
    store, job_id, _index, fence = plan_job(pipeline, target, catch_up)
    assert catch_up.active(job_id)
    store.locks.release(ALIAS, fence[ALIAS])  # its driver died here, long ago
    jt = store.t.job
    with store.engine.begin() as conn:
        long_ago = time.time() - 2 * pipeline.job.recovery_max_age_s
        conn.execute(jt.update().where(jt.c.id == job_id).values(updated_at=long_ago))

    _reindex(cli, shop)

    old = store.job_rows.job(job_id)
    assert old.status == JobStatus.FAILED and "beyond the recovery age" in (old.error_message or ""), old
    assert not catch_up.active(job_id), "the failed job's catch-up position is still kept"


def job_plans(pipeline: Any, source: Any) -> dict[str, Any]:
    """The plans the reindex resolves and hands its catch-up."""
    return {ALIAS: resolve_plans(pipeline, source, [ALIAS])[ALIAS][0]}
