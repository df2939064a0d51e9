"""Coordination: jobs, partitions, locks, dead letters, stats and change capture's state in one
SQL store (SQLite, PostgreSQL, MySQL/MariaDB), shared by every process of a run.

One module per concept, each a class over the store's engine and tables: ``jobs``,
``partitions`` (the claim and progress) and ``resets``, ``stats``, ``locks``, ``dead_letters``,
``write_ahead``, ``swap_log``, ``offsets`` (consumer offsets), ``ledger`` (document versions per
index), ``deferred_changes``, ``holds`` (holds with their lease, sync presence,
hand-overs), ``deferred_runs``, ``sync_events``, ``verify_runs``, ``transform_cache`` (what
an ``on_change`` transform computed per document). ``store.CoordinationStore``
opens them together, one attribute per concept (``store.job_rows.create_job(...)``,
``store.sync_events``, ``store.verify_runs``), and closes them as a context manager; ``views``
reads them for the server. Every table is defined in ``tables``
and created or migrated only by ``engine`` (versioned migrations). The package sits low in the
layers: it imports only ``config``, ``keys``, ``retry``, ``allocator`` and ``errors``.
"""

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
