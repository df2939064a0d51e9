"""The job and partition state machines alone (enforced by the store: tests/coordination/)."""

from __future__ import annotations

import itertools

import pytest

from sparkindex.coordination.states import (
    JOB_TRANSITIONS,
    PARTITION_TRANSITIONS,
    JobStatus,
    PartitionStatus,
    check_job,
    check_partition,
)
from sparkindex.errors import IllegalTransition

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
