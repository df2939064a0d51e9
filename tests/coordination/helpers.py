"""Shared helpers of the conformance suite (importable by spawned worker processes too)."""

from __future__ import annotations

import time
from typing import TypeVar

from sqlalchemy.engine import Engine

from sparkindex.coordination.base import StoreBase
from sparkindex.coordination.engine import ensure_schema
from sparkindex.coordination.records import JobRecord, PartitionSpec
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import make_tables

J = JobStatus
P = PartitionStatus
C = TypeVar("C", bound=StoreBase)
LONG_AGO = 1_000.0  # seconds in the past for a heartbeat that is certainly stale


def spec(i: int, *, entity: str = "products", estimated: int = 10, work: int = 10, priority: int = 0) -> PartitionSpec:
    return PartitionSpec(
        entity=entity,
        partition_index=i,
        range_start=None,
        range_end=None,
        estimated_count=estimated,
        work_units=work,
        priority=priority,
    )


def new_job(store: CoordinationStore, n: int) -> tuple[str, list[str]]:
    job = store.job_rows.create_job(["products"], {}, "test")
    store.partition_rows.add_partitions(job.id, [spec(i) for i in range(n)])
    return job.id, [p.id for p in store.partition_rows.partitions(job.id)]


def age_heartbeat(store: CoordinationStore, pid: str, seconds_ago: float = LONG_AGO) -> None:
    """Write the partition's heartbeat into the past (staleness without sleeping)."""
    pt = store.t.partition
    with store.engine.begin() as conn:
        res = conn.execute(pt.update().where(pt.c.id == pid).values(last_heartbeat=time.time() - seconds_ago))
        assert res.rowcount == 1


def expire(store: CoordinationStore, key: str) -> None:
    """Put the lock's expiry in the past, as if its holder had stopped refreshing long ago."""
    lt = store.t.lock
    with store.engine.begin() as conn:
        res = conn.execute(lt.update().where(lt.c.lock_key == key).values(expires_at=time.time() - 100))
        assert res.rowcount == 1


def job_in(store: CoordinationStore, status: JobStatus) -> JobRecord:
    """A job moved along legal edges to *status*."""
    paths = {
        J.INITIALIZING: [],
        J.READY: [J.READY],
        J.RUNNING: [J.READY, J.RUNNING],
        J.STOPPING: [J.READY, J.RUNNING, J.STOPPING],
        J.STOPPED: [J.READY, J.RUNNING, J.STOPPING, J.STOPPED],
        J.FAILED: [J.READY, J.RUNNING, J.FAILED],
        J.COMPLETED: [J.READY, J.RUNNING, J.COMPLETED],
        J.COMPLETED_WITH_ERRORS: [J.READY, J.RUNNING, J.COMPLETED_WITH_ERRORS],
    }
    job = store.job_rows.create_job(["products"], {}, "test")
    for step in paths[status]:
        job = store.job_rows.transition_job(job.id, step)
    assert job.status == status
    return job


def claim_all(url: str, prefix: str, ids: list[str], n: int, barrier: object, results: object) -> None:
    """Spawned worker of the claim race: wait for all the others, then try to claim every partition
    (in its own shuffled order, as its own run) and report the ones it won."""
    import random

    store = CoordinationStore(url, prefix)
    got: list[str] = []
    error = None
    try:
        order = list(ids)
        random.Random(n).shuffle(order)
        barrier.wait(timeout=120)  # type: ignore[attr-defined]
        for pid in order:
            rec = store.partition_rows.claim(pid, f"w{n}", f"run-{n}", stale_after_s=3600)
            if rec is None:
                continue
            if rec.status != P.PROCESSING or rec.owner != f"w{n}" or rec.id != pid:
                raise AssertionError(f"claim returned {rec}")
            got.append(rec.id)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        error = repr(exc)
    finally:
        store.close()
        results.put((n, got, error))  # type: ignore[attr-defined]


def concept_on(kind: type[C], engine: Engine, prefix: str = "") -> C:
    """One concept of the store (holds, offsets, the ledger...) on *engine*, its schema made current
    first, as opening the store does: for tests that shape the tables by hand before."""
    tables = make_tables(prefix)
    ensure_schema(engine, tables)
    return kind(engine, tables)
