"""A reindex whose coordination store is reached through PgBouncer in transaction pooling
(scripts/test-pgbouncer.sh): SIGKILLed mid-run, it resumes the same job, and the index is right.

Behind transaction pooling each store transaction may run on another server session, so any
session state the store relied on (a ``SET``, a session advisory lock, a prepared statement) would
be lost or leak between the driver, its Python workers and the lock keeper. The conformance suite
(tests/coordination, kind ``pgbouncer``) proves the store's operations one by one; this proves a
whole run and a crash through it.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.tables import make_tables
from sparkindex.resources import open_store
from tests.e2e.shop import make_shop
from tests.e2e.test_crashes import kill_driver_mid_job

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROWS = 6_000


@pytest.fixture
def pooled_pipeline(tmp_path: Path, services: dict[str, str]) -> Iterator[Path]:
    """The sample shop with its store in PostgreSQL, reached through PgBouncer."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    make_shop(tmp_path, products=ROWS, partition_size=300, batch_size=100, page_size=100)
    config = tmp_path / "pipeline.yaml"
    text = config.read_text(encoding="utf-8")
    store = f"  url: {services['pgbouncer']}\n  prefix: {prefix}\n"
    assert "  url: sqlite:///.sparkindex/state.db\n" in text
    config.write_text(text.replace("  url: sqlite:///.sparkindex/state.db\n", store), encoding="utf-8")
    yield config
    engine = sa.create_engine(services["postgres"].replace("postgresql://", "postgresql+psycopg://"))
    make_tables(prefix).metadata.drop_all(engine)
    engine.dispose()


def _reindex(cli: Path, config: Path) -> dict[str, object]:
    command = [str(cli), "reindex", "-c", str(config), "--json"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    summary: dict[str, object] = orjson.loads(run.stdout.strip().splitlines()[-1])
    return summary


def test_a_reindex_through_pgbouncer_killed_mid_run_resumes(cli: Path, pooled_pipeline: Path) -> None:
    pipeline = load_pipeline(pooled_pipeline)
    assert ":56432/" in pipeline.coordination_url(), "the store is reached through PgBouncer"
    with open_store(pipeline) as store:
        job, before, completed = kill_driver_mid_job(cli, pooled_pipeline, store)

        summary = _reindex(cli, pooled_pipeline)
        assert summary["job_id"] == job.id, "the rerun resumes the same job"
        assert summary["status"] == "COMPLETED"
        assert summary["indexed"] == summary["source_rows"] == ROWS
        after = {p.id: p for p in store.partition_rows.partitions(job.id)}
        assert all(p.status == PartitionStatus.COMPLETED for p in after.values())
        for pid in completed:  # finished before the kill: never claimed again
            assert after[pid].claims == before[pid].claims == 1
        assert store.job_rows.job(job.id).status == JobStatus.COMPLETED

    verify = subprocess.run(
        [str(cli), "verify", "-c", str(pooled_pipeline), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stderr[-4000:]
    report = orjson.loads(verify.stdout.strip().splitlines()[-1])
    drift = (report["missing"], report["extra"], report["stale"], report["duplicates"], report["checked"])
    assert drift == (0, 0, 0, 0, ROWS)
