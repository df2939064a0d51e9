"""The store survives a real PostgreSQL restart without pinging every checkout.

No ``pool_pre_ping`` (it would cost a round trip per statement): the first statement on a dead
pooled connection fails as a disconnect, SQLAlchemy invalidates the whole pool, and the store
reruns that statement on a fresh connection.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.coordination.states import PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from tests.conftest import ROOT
from tests.coordination.helpers import spec

PG_BIN = "/usr/lib/postgresql/15/bin"
PG_DATA = "/tmp/sparkindex-services/pg"


def restart_postgres(log: Path) -> None:
    """A real fast restart; ``-w`` returns once the server accepts connections again.

    The server's own output goes to its log file (as scripts/test-services.sh starts it), so no
    pipe of ours is held open by the new postmaster.
    """
    cmd = f"{PG_BIN}/pg_ctl -D {PG_DATA} -l {PG_DATA}/server.log -w -m fast restart"
    with log.open("wb") as out:
        res = subprocess.run(["su", "postgres", "-c", cmd], stdout=out, stderr=subprocess.STDOUT, timeout=120)
    assert res.returncode == 0, log.read_text()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.serial  # it restarts the shared PostgreSQL: every other test's connections would drop
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_store_keeps_working_after_a_real_postgres_restart(store_url: tuple[str, str], tmp_path: Path) -> None:
    url, prefix = store_url
    store = CoordinationStore(url, prefix)
    try:
        assert not store.engine.pool._pre_ping and not store.single.pool._pre_ping, "no ping per checkout"
        job = store.job_rows.create_job(["products"], {}, "test")
        store.partition_rows.add_partitions(job.id, [spec(0), spec(1), spec(2)])
        a, b, c = (p.id for p in store.partition_rows.partitions(job.id))
        # this thread's direct connection (PostgreSQL's claim path), which the restart will kill too
        assert store.partition_rows.claim(c, "before-restart", "run-A", stale_after_s=60) is not None
        assert store.partition_rows.direct_connections.open_count() == 1
        # several pooled connections in both pools, all of which the restart will kill
        conns = [engine.connect() for engine in (store.engine, store.single) for _ in range(3)]
        started = conns[0].execute(sa.text("SELECT pg_postmaster_start_time()")).scalar_one()
        for conn in conns:
            conn.close()
        for engine in (store.engine, store.single):
            assert engine.pool.checkedin() >= 3, "the pool must hold connections the restart will kill"

        try:
            restart_postgres(tmp_path / "pg_ctl.log")
        except BaseException:
            subprocess.run(["bash", str(ROOT / "scripts" / "test-services.sh")], check=False, capture_output=True)
            raise

        # the very same store object, its pooled connections now dead: the product's path first
        rec = store.partition_rows.claim(a, "after-restart", "run-A", stale_after_s=60)
        assert rec is not None and rec.status == PartitionStatus.PROCESSING and rec.claim_token == 1
        store.partition_rows.save_progress(rec.id, rec.claim_token, [1], 1, 0)
        store.partition_rows.complete(rec.id, rec.claim_token, cursor=[2], success=1)
        done = store.partition_rows.partition(rec.id)
        assert done.status == PartitionStatus.COMPLETED and done.processed_count == 2
        again = store.partition_rows.claim(b, "after-restart", "run-A", stale_after_s=60)
        assert again is not None
        # the one-statement engine's pool (the rare paths: release, refusals) recovers as well
        store.partition_rows.release(b, again.claim_token)
        assert store.partition_rows.partition(b).status == PartitionStatus.PENDING
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_postmaster_start_time()")).scalar_one() > started, "no restart"
    finally:
        store.close()
