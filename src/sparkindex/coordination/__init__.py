"""Coordination: jobs, partitions, locks, dead letters and stats in one SQL store."""

from sparkindex.coordination.records import (
    DeadLetter,
    EntityStats,
    JobRecord,
    LockRecord,
    PartitionRecord,
    PartitionSpec,
)
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore

__all__ = [
    "CoordinationStore",
    "DeadLetter",
    "EntityStats",
    "JobRecord",
    "JobStatus",
    "LockRecord",
    "PartitionRecord",
    "PartitionSpec",
    "PartitionStatus",
]
