"""What one verify task is given: its range, its options, and what a worker process holds.

Shared by the range comparisons (:mod:`sparkindex.verify.ranges`,
:mod:`sparkindex.verify.range_checksums`) and the Spark job that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.documents.source_lookup import SourceLookup
from sparkindex.retry import Backoff
from sparkindex.sources.base import Source
from sparkindex.targets.target import Target


class Resources(Protocol):
    """What a worker process holds (:class:`sparkindex.spark.context.WorkerContext`)."""

    @property
    def source(self) -> Source: ...

    @property
    def target(self) -> Target: ...

    @property
    def store(self) -> CoordinationStore: ...

    def builder(self, alias: str) -> DocumentBuilder: ...

    def lookup(self, alias: str) -> SourceLookup:
        """Which ids the source would still build, for *alias* (cached with its builder)."""
        ...

    def primary_builder(self, alias: str) -> DocumentBuilder | None:
        """With a read replica: *alias*'s builder on the primary, which drift is asked again
        (:mod:`sparkindex.verify.primary_check`); None when the source is the primary."""
        ...

    def primary_lookup(self, alias: str) -> SourceLookup | None:
        """With a read replica: which ids the primary would still build; else None."""
        ...


@dataclass(frozen=True)
class RangeTask:
    """One range of one alias, as plain values (pickled into Spark tasks).

    Source side: ``after``/``upto`` are row keys as stored JSON (:func:`sparkindex.keys.dump_key`),
    read back exactly as the reindex reads its partitions. Index side (and a source range compared
    by checksum): ``lo``/``hi`` bound sort keys, ``[lo, hi)``.
    """

    alias: str
    index: str | None
    side: str
    after: str | None = None
    upto: str | None = None
    lo: str | None = None
    hi: str | None = None
    #: source side: compare the range's checksums first (``lo``/``hi`` then bound the same
    #: documents in the index), and document by document only if they differ
    checksums: bool = False


@dataclass(frozen=True)
class TaskOptions:
    repair: bool = False
    #: identifies the repair run: a document rejected again by a later run counts another attempt
    attempt: str = "repair"
    retries: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0

    def backoff(self) -> Backoff:
        return Backoff(self.backoff_initial_s, self.backoff_max_s)
