"""The SQL coordination store: one object over jobs, partitions, stats, locks, dead letters and
change capture's state.

Each concept lives in its own module and class (:mod:`jobs`, :mod:`partitions`, :mod:`resets`,
:mod:`stats`, :mod:`locks`, :mod:`dead_letters`, :mod:`write_ahead`, :mod:`swap_log`,
:mod:`offsets`, :mod:`ledger`, :mod:`deferred_changes`, :mod:`holds`, :mod:`deferred_runs`); this
facade only connects, creates or upgrades the schema, and combines them, so callers keep
constructing ``CoordinationStore(url, prefix)``.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from sparkindex.config.secrets import redact_url
from sparkindex.coordination.base import Fence, alias_key, rerun_on_conflict, retryable
from sparkindex.coordination.dead_letters import DeadLetterStore
from sparkindex.coordination.deferred_changes import DeferredChanges
from sparkindex.coordination.deferred_runs import DeferredRuns
from sparkindex.coordination.engine import ensure_schema, make_engine
from sparkindex.coordination.holds import SyncHolds
from sparkindex.coordination.jobs import JobRows
from sparkindex.coordination.ledger import VersionLedger
from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.offsets import ConsumerOffsetRows
from sparkindex.coordination.partitions import PartitionRows
from sparkindex.coordination.records import EntityStats
from sparkindex.coordination.resets import PartitionResets
from sparkindex.coordination.stats import PartitionStats
from sparkindex.coordination.swap_log import SwapLog
from sparkindex.coordination.tables import make_tables
from sparkindex.coordination.write_ahead import WriteAheadLog
from sparkindex.errors import TransientError

__all__ = ["CoordinationStore", "Fence", "alias_key", "rerun_on_conflict", "retryable"]


class CoordinationStore(JobRows, PartitionRows, PartitionResets, PartitionStats):
    def __init__(self, url: str, prefix: str = "") -> None:
        self.url = url
        engine = make_engine(url)
        tables = make_tables(prefix)
        try:
            ensure_schema(engine, tables)
        except DBAPIError as exc:
            raise TransientError(
                f"coordination store {redact_url(url)} is unreachable: {redact_url(str(exc.orig)).strip()}"
            ) from None
        single = None if engine.dialect.name == "sqlite" else make_engine(url, autocommit=True)
        super().__init__(engine, tables, single)
        self.locks = LockManager(engine, tables.lock)
        self.dead_letters = DeadLetterStore(engine, tables.dead_letter, tables.dead_letter_resolved)
        self.write_ahead = WriteAheadLog(engine, tables.write_ahead, tables.partition)
        self.swap_log = SwapLog(engine, tables.swap_attempt, tables.lock)
        # change capture's state, one concept each
        self.offsets = ConsumerOffsetRows(engine, tables)
        self.ledger = VersionLedger(engine, tables)
        self.deferred_changes = DeferredChanges(engine, tables)
        self.sync_holds = SyncHolds(engine, tables)
        self.deferred_runs = DeferredRuns(engine, tables)

    def close(self) -> None:
        self.direct_connections.close()
        self.engine.dispose()
        self.single.dispose()

    def roll_up(self, job_id: str, *, fence: Fence | None = None) -> dict[str, EntityStats]:
        """Copy the partition totals onto the job row (what `status` and the web page show)."""
        stats = self.stats(job_id)
        self.update_job(
            job_id,
            fence=fence,
            total_records=sum(s.total for s in stats.values()),
            processed_records=sum(s.processed for s in stats.values()),
            success_records=sum(s.success for s in stats.values()),
            failed_records=sum(s.failed for s in stats.values()),
            stats={k: s.to_dict() for k, s in stats.items()},
        )
        return stats
