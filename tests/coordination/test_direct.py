"""PostgreSQL's hot path (claim, progress, complete) on psycopg's cursor: it bypasses SQLAlchemy's
execution, keeps SQLAlchemy's error contract, and survives its connection being killed."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

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


def _backend_pid(store: CoordinationStore) -> int:
    """This thread's direct connection's server process (made if the thread has none)."""
    return int(store.partition_rows.direct_connections.connection().info.backend_pid)


def _alive(store: CoordinationStore, pid: int) -> bool:
    with store.engine.connect() as conn:
        return bool(conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar())


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_the_hot_path_runs_on_the_driver_cursor(store: CoordinationStore) -> None:
    _, (pid, other) = new_job(store, 2)
    seen = _sqlalchemy_statements(store)
    rec = store.partition_rows.claim(pid, "w1", "run-A", stale_after_s=60)
    assert rec is not None and rec.status == PartitionStatus.PROCESSING and rec.claim_token == 1
    assert rec.cursor is None and rec.range_start is None and rec.last_heartbeat > 0  # the whole row came back
    store.partition_rows.save_progress(pid, rec.claim_token, ["a|b", None], 3, 1, writer="w1")
    store.partition_rows.complete(pid, rec.claim_token, cursor=["z"], success=2, writer="w1")
    assert seen == [], "claim, progress and complete must not go through SQLAlchemy's execution"
    assert store.partition_rows.direct_connections.open_count() == 1
    done = store.partition_rows.partition(pid)
    assert (done.status, done.cursor, done.success_count, done.failed_count) == (
        PartitionStatus.COMPLETED,
        ("z",),
        5,
        1,
    )
    # the rare paths keep their checks: a stale token is refused and counted
    with pytest.raises(Exception, match="no longer the owner"):
        store.partition_rows.save_progress(pid, rec.claim_token, ["y"], 1, 0)
    pt = store.t.partition
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(pt.c.update_errors).where(pt.c.id == pid)).scalar_one() == 1
    assert store.partition_rows.claim(other, "w2", "run-B", stale_after_s=60) is not None


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_killed_connection_is_replaced_and_the_statement_rerun(store: CoordinationStore) -> None:
    _, (a, b) = new_job(store, 2)
    first = store.partition_rows.claim(a, "w1", "run-A", stale_after_s=60)
    assert first is not None
    killed = _backend_pid(store)
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": killed}).scalar_one()
    failures: list[str] = []
    original = store.partition_rows.direct_statements()[0].run.__func__  # type: ignore[attr-defined]

    def watched(self: Any, params: Any) -> Any:
        try:
            return original(self, params)
        except sa.exc.DBAPIError as exc:
            failures.append(f"invalidated={exc.connection_invalidated}")
            raise

    for stmt in store.partition_rows.direct_statements():
        stmt.run = watched.__get__(stmt)  # type: ignore[method-assign]
    # the thread's connection is dead: the claim fails as a disconnect and is rerun on a new one
    second = store.partition_rows.claim(b, "w1", "run-A", stale_after_s=60)
    assert second is not None and second.claim_token == 1
    assert failures == ["invalidated=True"], failures
    assert _backend_pid(store) != killed
    store.partition_rows.complete(a, first.claim_token, success=1)
    assert store.partition_rows.partition(a).status == PartitionStatus.COMPLETED


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_an_interrupted_statement_leaves_no_busy_connection_behind(store: CoordinationStore) -> None:
    """A claim interrupted mid-statement by something other than the driver (here a signal
    handler's exception while it waits on a row lock) must not leave the thread's connection busy."""
    _, (a, b) = new_job(store, 2)
    pt = store.t.partition
    interrupted = _backend_pid(store)
    with store.engine.connect() as locker:
        locker.execute(sa.select(pt.c.id).where(pt.c.id == a).with_for_update())  # holds the row

        def interrupt(*_: Any) -> None:
            raise RuntimeError("interrupted")

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(RuntimeError, match="interrupted"):
                store.partition_rows.claim(a, "w1", "run-A", stale_after_s=60)  # blocks on the row lock
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        locker.rollback()
    rec = store.partition_rows.claim(b, "w1", "run-A", stale_after_s=60)  # the same thread goes on
    assert rec is not None and rec.claim_token == 1
    assert _backend_pid(store) != interrupted, "the busy connection was replaced"


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_close_closes_every_connection_and_the_store_goes_on(store: CoordinationStore) -> None:
    _, (a, b) = new_job(store, 2)
    assert store.partition_rows.claim(a, "w1", "run-A", stale_after_s=60) is not None
    before = _backend_pid(store)
    store.close()
    assert store.partition_rows.direct_connections.open_count() == 0
    assert not _alive(store, before), "closed, not left to the garbage collector"
    assert store.partition_rows.claim(b, "w1", "run-A", stale_after_s=60) is not None  # reconnects
    assert _backend_pid(store) != before


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_server_error_is_sqlalchemys_dbapi_error(store: CoordinationStore) -> None:
    _, (pid,) = new_job(store, 1)
    rec = store.partition_rows.claim(pid, "w1", "run-A", stale_after_s=60)
    assert rec is not None
    connection = _backend_pid(store)
    with pytest.raises(sa.exc.DBAPIError) as caught:
        store.partition_rows.save_progress(pid, rec.claim_token, None, 1, 0, writer="w" * 300)  # writer is VARCHAR(255)
    assert not caught.value.connection_invalidated
    assert "[SQL: UPDATE" in str(caught.value) and "w" * 300 not in str(caught.value), "parameters stay hidden"
    store.partition_rows.complete(pid, rec.claim_token, success=1)
    assert _backend_pid(store) == connection, "a statement error keeps the (idle) connection"


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_each_thread_has_its_own_connection(store: CoordinationStore) -> None:
    job_id, ids = new_job(store, 8)
    all_connected, counted = threading.Barrier(5, timeout=60), threading.Barrier(5, timeout=60)
    errors: list[BaseException] = []

    def work(share: list[str], name: str) -> None:
        try:
            for n, pid in enumerate(share):
                rec = store.partition_rows.claim(pid, name, "run-A", stale_after_s=60, take_over_run=False)
                assert rec is not None
                if n == 0:
                    all_connected.wait()
                    counted.wait()
                store.partition_rows.complete(pid, rec.claim_token, success=1)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(ids[n::4], f"t{n}")) for n in range(4)]
    for t in threads:
        t.start()
    all_connected.wait()
    live = store.partition_rows.direct_connections.open_count()
    counted.wait()
    for t in threads:
        t.join()
    assert not errors, errors
    assert live == 4
    assert {p.status for p in store.partition_rows.partitions(job_id)} == {PartitionStatus.COMPLETED}


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_thread_that_ends_takes_its_connection_with_it(store: CoordinationStore) -> None:
    """A worker renews each partition's lease from a thread of that partition: a connection kept
    per thread must close when its thread ends, or a worker's store grows by one connection per
    partition for its whole life."""
    _, ids = new_job(store, 6)
    mine = store.partition_rows.claim(ids[0], "main", "run-A", stale_after_s=60)
    assert mine is not None
    backends: list[int] = []

    def one_claim(pid: str) -> None:
        assert store.partition_rows.claim(pid, "renewer", "run-A", stale_after_s=60, take_over_run=False) is not None
        backends.append(_backend_pid(store))

    for pid in ids[1:]:
        thread = threading.Thread(target=one_claim, args=(pid,))
        thread.start()
        thread.join()
    assert len(set(backends)) == 5, "each thread had a connection of its own while it ran"
    assert store.partition_rows.direct_connections.open_count() == 1, "only the living thread's is open"
    deadline = time.monotonic() + 10  # a backend leaves pg_stat_activity a moment after its client closes
    while any(_alive(store, b) for b in backends) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(store, b) for b in backends), "closed on the server too, not just forgotten"
