"""The job and partition state machines, alone and as enforced by the coordination store."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkindex.coordination.records import PartitionSpec
from sparkindex.coordination.states import (
    JOB_TRANSITIONS,
    PARTITION_TRANSITIONS,
    JobStatus,
    PartitionStatus,
    check_job,
    check_partition,
)
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import IllegalTransition, LockLost

JOB_EDGES = [(a, b) for a, targets in JOB_TRANSITIONS.items() for b in sorted(targets)]
JOB_NON_EDGES = [(a, b) for a, b in itertools.product(JobStatus, JobStatus) if b not in JOB_TRANSITIONS[a]]
PART_EDGES = [(a, b) for a, targets in PARTITION_TRANSITIONS.items() for b in sorted(targets)]
PART_NON_EDGES = [
    (a, b) for a, b in itertools.product(PartitionStatus, PartitionStatus) if b not in PARTITION_TRANSITIONS[a]
]


def _id(pair: tuple[str, str]) -> str:
    return f"{pair[0]}->{pair[1]}"


def test_tables_cover_every_state() -> None:
    assert set(JOB_TRANSITIONS) == set(JobStatus)
    assert set(PARTITION_TRANSITIONS) == set(PartitionStatus)
    # the parametrisations below together cover every ordered pair exactly once
    assert len(JOB_EDGES) + len(JOB_NON_EDGES) == len(JobStatus) ** 2
    assert len(PART_EDGES) + len(PART_NON_EDGES) == len(PartitionStatus) ** 2
    assert JOB_EDGES and JOB_NON_EDGES and PART_EDGES and PART_NON_EDGES


@pytest.mark.parametrize("edge", JOB_EDGES, ids=_id)
def test_job_edge_accepted(edge: tuple[JobStatus, JobStatus]) -> None:
    check_job(*edge)
    check_job(str(edge[0]), str(edge[1]))  # plain strings, as read from the database


@pytest.mark.parametrize("pair", JOB_NON_EDGES, ids=_id)
def test_job_non_edge_rejected(pair: tuple[JobStatus, JobStatus]) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_job(*pair)
    assert str(pair[0]) in str(info.value) and str(pair[1]) in str(info.value)


@pytest.mark.parametrize("edge", PART_EDGES, ids=_id)
def test_partition_edge_accepted(edge: tuple[PartitionStatus, PartitionStatus]) -> None:
    check_partition(*edge)
    check_partition(str(edge[0]), str(edge[1]))


@pytest.mark.parametrize("pair", PART_NON_EDGES, ids=_id)
def test_partition_non_edge_rejected(pair: tuple[PartitionStatus, PartitionStatus]) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_partition(*pair)
    assert str(pair[0]) in str(info.value) and str(pair[1]) in str(info.value)


def test_finished_states_are_terminal() -> None:
    for to in JobStatus:
        with pytest.raises(IllegalTransition):
            check_job(JobStatus.COMPLETED, to)
        with pytest.raises(IllegalTransition):
            check_job(JobStatus.COMPLETED_WITH_ERRORS, to)
    for to in PartitionStatus:
        with pytest.raises(IllegalTransition):
            check_partition(PartitionStatus.COMPLETED, to)


def test_unknown_state_name_is_rejected() -> None:
    with pytest.raises((ValueError, IllegalTransition)):
        check_job("NOT_A_STATE", JobStatus.READY)
    with pytest.raises((ValueError, IllegalTransition)):
        check_partition(PartitionStatus.PENDING, "NOT_A_STATE")


# -- through the store -----------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoordinationStore]:
    s = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


def test_store_refuses_illegal_job_transition_and_keeps_status(store: CoordinationStore) -> None:
    job = store.create_job(["products"], {}, "test")
    assert job.status == JobStatus.INITIALIZING
    with pytest.raises(IllegalTransition):
        store.transition_job(job.id, JobStatus.COMPLETED)
    after = store.job(job.id)
    assert after.status == JobStatus.INITIALIZING
    assert after.completed_at is None
    # a legal move still works afterwards
    assert store.transition_job(job.id, JobStatus.READY).status == JobStatus.READY
    with pytest.raises(IllegalTransition):
        store.transition_job(job.id, JobStatus.INITIALIZING)
    assert store.job(job.id).status == JobStatus.READY


def test_store_legal_job_path_sets_timestamps(store: CoordinationStore) -> None:
    job = store.create_job(["products"], {}, "test")
    store.transition_job(job.id, JobStatus.READY)
    running = store.transition_job(job.id, JobStatus.RUNNING)
    assert running.started_at is not None and running.completed_at is None
    done = store.transition_job(job.id, JobStatus.COMPLETED)
    assert done.status == JobStatus.COMPLETED and done.completed_at is not None
    with pytest.raises(IllegalTransition):
        store.transition_job(job.id, JobStatus.READY)
    assert store.job(job.id).status == JobStatus.COMPLETED


def test_complete_on_pending_partition_is_lock_lost(store: CoordinationStore) -> None:
    job = store.create_job(["products"], {}, "test")
    store.add_partitions(job.id, [PartitionSpec("products", 0, None, None, 10, 10, 0)])
    (part,) = store.partitions(job.id)
    assert part.status == PartitionStatus.PENDING
    with pytest.raises(LockLost):
        store.complete(part.id, part.claim_token)
    with pytest.raises(LockLost):
        store.complete(part.id, part.claim_token + 1)
    after = store.partition(part.id)
    assert after.status == PartitionStatus.PENDING
    assert after.claim_token == part.claim_token
