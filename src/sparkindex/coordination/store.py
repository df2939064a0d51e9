"""The SQL coordination store: one object over jobs, partitions, stats, locks, dead letters,
change capture's state, sync events and verify runs.

Each concept lives in its own module and class, and the store holds one of each as an attribute
named for it: ``job_rows`` (:mod:`jobs`), ``partition_rows`` (:mod:`partitions`: the claim and
progress), ``partition_resets`` (:mod:`resets`), ``partition_stats`` (:mod:`stats`), ``locks``,
``dead_letters``, ``write_ahead``, ``swap_log``, ``offsets``, ``ledger``, ``deferred_changes``,
``sync_holds``, ``deferred_runs``, ``sync_events``, ``verify_runs`` and ``transform_cache``. The
store itself only connects, creates or upgrades the schema, tells the time by the store's clock,
rolls partition totals up onto a job, and closes. It is a context manager
(``with open_store(pipeline) as store:``, :mod:`sparkindex.resources`).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

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
from sparkindex.coordination.sync_events import SyncEvents
from sparkindex.coordination.tables import make_tables
from sparkindex.coordination.transform_cache import TransformOutputCache
from sparkindex.coordination.verify_runs import VerifyRuns
from sparkindex.coordination.write_ahead import WriteAheadLog
from sparkindex.errors import TransientError

__all__ = ["CoordinationStore", "Fence", "alias_key", "rerun_on_conflict", "retryable"]


class CoordinationStore:
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
        single = engine if engine.dialect.name == "sqlite" else make_engine(url, autocommit=True)
        #: the engine of transactions; *single* runs one-statement writes (see :class:`~.base.StoreBase`)
        self.engine, self.single, self.t = engine, single, tables
        # jobs and partitions
        self.job_rows = JobRows(engine, tables, single)
        self.partition_rows = PartitionRows(engine, tables, single)
        self.partition_resets = PartitionResets(engine, tables, single)
        self.partition_stats = PartitionStats(engine, tables, single)
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
        # what the server reads: a sync's errors and gaps, and verify's results
        self.sync_events = SyncEvents(engine, tables.prefix, opened=True)
        self.verify_runs = VerifyRuns(self)
        # what expensive per-document transforms produced, kept for documents whose inputs stay
        self.transform_cache = TransformOutputCache(engine, tables)

    def now(self) -> float:
        """The store's clock (:func:`~.base.store_now`): what leases and parked partitions are judged on."""
        return self.job_rows.now()

    def roll_up(self, job_id: str, *, fence: Fence | None = None) -> dict[str, EntityStats]:
        """Copy the partition totals onto the job row (what `status` and the web page show)."""
        stats = self.partition_stats.stats(job_id)
        self.job_rows.update_job(
            job_id,
            fence=fence,
            total_records=sum(s.total for s in stats.values()),
            processed_records=sum(s.processed for s in stats.values()),
            success_records=sum(s.success for s in stats.values()),
            failed_records=sum(s.failed for s in stats.values()),
            stats={k: s.to_dict() for k, s in stats.items()},
        )
        return stats

    def close(self) -> None:
        """Close every connection the store holds (pooled, autocommit and direct ones); closing
        again does nothing more."""
        self.partition_rows.direct_connections.close()
        self.engine.dispose()
        self.single.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
