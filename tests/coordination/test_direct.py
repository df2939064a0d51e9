"""PostgreSQL's hot path (claim, progress, complete) on psycopg's cursor: it bypasses SQLAlchemy's
execution, keeps SQLAlchemy's error contract, and survives its connection being killed."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from sparkindex.coordination.states import PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from tests.coordination.helpers import new_job

pytestmark = pytest.mark.postgres


def _sqlalchemy_statements(store: CoordinationStore) -> list[str]:
    seen: list[str] = []
    for engine in (store.engine, store.single):
        sa.event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def _backend_pids(store: CoordinationStore) -> list[int]:
    """The server processes whose last statement touched the partition table (the direct connections)."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT pid FROM pg_stat_activity WHERE query LIKE :q AND pid <> pg_backend_pid()"),
            {"q": f"%{store.t.partition.name}%"},
        )
        return [r.pid for r in rows]


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_the_hot_path_runs_on_the_driver_cursor(store: CoordinationStore) -> None:
    _, (pid, other) = new_job(store, 2)
    seen = _sqlalchemy_statements(store)
    rec = store.claim(pid, "w1", "run-A", stale_after_s=60)
    assert rec is not None and rec.status == PartitionStatus.PROCESSING and rec.claim_token == 1
    assert rec.cursor is None and rec.range_start is None and rec.last_heartbeat > 0  # the whole row came back
    store.save_progress(pid, rec.claim_token, ["a|b", None], 3, 1, writer="w1")
    store.complete(pid, rec.claim_token, cursor=["z"], success=2, writer="w1")
    assert seen == [], "claim, progress and complete must not go through SQLAlchemy's execution"
    assert store.direct_connections.open_count() == 1
    done = store.partition(pid)
    assert (done.status, done.cursor, done.success_count, done.failed_count) == (
        PartitionStatus.COMPLETED,
        ("z",),
        5,
        1,
    )
    # the rare paths keep their checks: a stale token is refused and counted
    with pytest.raises(Exception, match="no longer the owner"):
        store.save_progress(pid, rec.claim_token, ["y"], 1, 0)
    pt = store.t.partition
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(pt.c.update_errors).where(pt.c.id == pid)).scalar_one() == 1
    assert store.claim(other, "w2", "run-B", stale_after_s=60) is not None


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_killed_connection_is_replaced_and_the_statement_rerun(store: CoordinationStore) -> None:
    _, (a, b) = new_job(store, 2)
    first = store.claim(a, "w1", "run-A", stale_after_s=60)
    assert first is not None
    pids = _backend_pids(store)
    assert len(pids) == 1, pids
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pids[0]}).scalar_one()
    # the thread's connection is dead: the claim fails as a disconnect, is rerun on a new one
    second = store.claim(b, "w1", "run-A", stale_after_s=60)
    assert second is not None and second.claim_token == 1
    store.complete(a, first.claim_token, success=1)
    assert store.partition(a).status == PartitionStatus.COMPLETED
    assert _backend_pids(store) != pids


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_server_error_is_sqlalchemys_dbapi_error(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.claim(pid, "w1", "run-A", stale_after_s=60)
    assert rec is not None
    with pytest.raises(sa.exc.DBAPIError) as caught:
        store.save_progress(pid, rec.claim_token, None, 1, 0, writer="w" * 300)  # writer is VARCHAR(255)
    assert not caught.value.connection_invalidated
    assert "[SQL: UPDATE" in str(caught.value) and "w" * 300 not in str(caught.value), "parameters stay hidden"
    store.complete(pid, rec.claim_token, success=1)  # the same connection goes on
    assert store.direct_connections.open_count() == 1


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_each_thread_has_its_own_connection(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 8)
    all_connected, counted = threading.Barrier(5, timeout=60), threading.Barrier(5, timeout=60)
    errors: list[BaseException] = []

    def work(share: list[str], name: str) -> None:
        try:
            for n, pid in enumerate(share):
                rec = store.claim(pid, name, "run-A", stale_after_s=60, take_over_run=False)
                assert rec is not None
                if n == 0:
                    all_connected.wait()
                    counted.wait()
                store.complete(pid, rec.claim_token, success=1)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(ids[n::4], f"t{n}")) for n in range(4)]
    for t in threads:
        t.start()
    all_connected.wait()
    live = store.direct_connections.open_count()
    counted.wait()
    for t in threads:
        t.join()
    assert not errors, errors
    assert live == 4
    assert {p.status for p in store.partitions(job_id)} == {PartitionStatus.COMPLETED}
