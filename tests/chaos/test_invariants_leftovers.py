"""The leftovers invariant sees each leftover it reports on: planted one by one in a real store
(SQLite), each is reported; a store where every job ended cleanly reports nothing."""

from __future__ import annotations

from pathlib import Path

from chaos.invariants import CATCH_UP_PREFIX, left_unfinished

from sparkindex.coordination.offsets import ConsumerOffsetRows
from sparkindex.coordination.recovery import NOT_RESUMABLE
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from tests.coordination.helpers import job_in


def _store(tmp_path: Path) -> tuple[CoordinationStore, ConsumerOffsetRows]:
    store = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    return store, store.offsets


def test_a_clean_store_has_no_leftovers(tmp_path: Path) -> None:
    store, offsets = _store(tmp_path)
    job_in(store, JobStatus.COMPLETED)
    running = job_in(store, JobStatus.FAILED)  # recent and resumable: a rerun may still finish it
    offsets.save(CATCH_UP_PREFIX + running.id, {"products": (5, {"lsn": "0/5"}, "products_v2")})
    assert left_unfinished(store) == []


def test_each_leftover_is_reported(tmp_path: Path) -> None:
    store, offsets = _store(tmp_path)
    running = job_in(store, JobStatus.RUNNING)
    done = job_in(store, JobStatus.COMPLETED)
    abandoned = job_in(store, JobStatus.FAILED)
    store.job_rows.update_job(abandoned.id, error_message=NOT_RESUMABLE + "abandoned by reindex --new")
    for job in (done, abandoned):
        offsets.save(CATCH_UP_PREFIX + job.id, {"products": (7, {"lsn": "0/7"}, "products_v3")})

    found = left_unfinished(store)

    assert f"job {running.id} left RUNNING" in found
    assert sum(f"catch-up position of ended job {done.id}" in f for f in found) == 1
    assert sum(f"catch-up position of ended job {abandoned.id}" in f for f in found) == 1
    assert len(found) == 3, found
