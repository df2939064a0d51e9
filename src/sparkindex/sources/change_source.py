"""The one interface every change source implements, and the values it produces.

It sits in ``sources`` because the log-based sources live with their dialect
(``sources/postgres/changes.py``, ``sources/mysql/changes.py``) and the polling source in
``capture/polling.py``; which one a pipeline gets is chosen in ``capture/source.py``.

Offsets are plain JSON dicts (what Spark checkpoints and the store keeps); a source turns its
own offset into an integer ``position`` (monotone in commit order) for versions and filtering.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Self, final

from sparkindex.config.model import Pipeline
from sparkindex.sources.base import Source
from sparkindex.sources.change_model import Batch, Change

#: how many rows one probe read asks for, and how many reads it makes before it gives up
#: answering "nothing pending" (then it says "maybe": a caller waits rather than stop early)
PROBE_LIMIT = 1000
PROBE_READS = 50


@dataclass(frozen=True)
class WatchedTable:
    """A table whose changes matter, and the columns its deletes must reveal (see fanout)."""

    name: str
    link_columns: list[str]
    where: str


@dataclass(frozen=True)
class Lag:
    """How far behind the head a position is: bytes of log retained (None where the source
    retains nothing for us) and seconds since the oldest change not yet applied."""

    bytes: int | None
    seconds: float


@dataclass(frozen=True)
class Gap:
    """Why the log cannot serve every change after a stored offset (see :meth:`ChangeSource.continuity`)."""

    #: what happened, for people: names the slot, GTID or setting and both positions
    reason: str
    #: the stored position the log can no longer serve from
    stored: int
    #: the oldest position the log can serve from now, when the source knows it
    available: int | None = None


class ChangeSource(ABC):
    """Reads committed changes of the watched tables, in commit order, from an offset; a context
    manager that closes it."""

    #: whether an acknowledged position at or past the head recorded at start proves the source
    #: has nothing more for ``--until-caught-up`` (a GTID sequence does); otherwise the source is
    #: read once more (polling's overlap window finds late commits below its position)
    exact_positions: ClassVar[bool] = False
    #: whether the offset :meth:`head` returns is one the source can resume from exactly (every
    #: commit up to it is at or before it, every later one after it): a bounded run that found
    #: nothing more up to that head may store it as its position
    head_is_resumable: ClassVar[bool] = False

    def __init__(self, pipeline: Pipeline, source: Source, tables: Sequence[WatchedTable], consumer: str) -> None:
        """*consumer* names whoever reads (a consumer group, a reindex's catch-up): sources that
        keep server-side state per reader (a PostgreSQL slot) derive its name from it."""
        self.pipeline = pipeline
        self.source = source
        self.tables = list(tables)
        self.consumer = consumer
        #: set while :meth:`pending` probes: reads then look for commits only (no key diff)
        self.probing = False

    @property
    def first_batch_needed(self) -> bool:
        """Whether the stream's first batch carries work no probe can see (polling's key diff),
        so that ``--until-caught-up`` must see one batch acknowledged before it may stop."""
        return False

    @abstractmethod
    def check(self) -> None:
        """Refuse, with a :class:`ConfigError` naming the setting or table, what cannot work."""

    @abstractmethod
    def start(self) -> dict[str, Any]:
        """Make sure reading can begin (create the slot on first run); return the offset of "now":
        where a consumer without a saved offset starts."""

    @abstractmethod
    def position(self, offset: Mapping[str, Any]) -> int:
        """The integer position of *offset* (monotone in commit order)."""

    @abstractmethod
    def read(self, start: Mapping[str, Any], limit: int, until: Mapping[str, Any] | None = None) -> Batch:
        """Changes committed after *start*, at most about *limit*, none committed after *until*."""

    @abstractmethod
    def head(self) -> dict[str, Any]:
        """The offset of the newest committed change, for "apply everything committed by now"."""

    def continuity(self, offset: Mapping[str, Any]) -> Gap | None:
        """Whether the log can still serve every change committed after *offset* (a consumer's
        stored offset); a :class:`Gap` says why not. Asked before reading anything on every start
        and again whenever a read fails: a slot dropped and created again, or a purged binlog,
        must never look like a quiet database. Sources that keep no log (polling) have no gap."""
        return None

    def prepare(self) -> None:
        """Server-side housekeeping before :meth:`continuity` is asked (a slot named the old way
        adopted under its new name). Idempotent."""

    def acknowledge(self, offset: Mapping[str, Any]) -> None:
        """Everything up to *offset* is durable in the target: server-side state may let it go."""

    @abstractmethod
    def lag(self, offset: Mapping[str, Any]) -> Lag: ...

    def pending(self, start: Mapping[str, Any], until: Mapping[str, Any] | None = None) -> bool:
        """Whether a change of a watched table was committed after *start* (up to *until*).

        One read is not enough: a log holds transactions that touch no watched table (DDL, an
        autovacuum's statistics, other tables), and a read may stop after such one with no
        change to show. So the probe reads on from where each read ended while the source says
        there is more; a probe that cannot get to the end answers "pending" (the caller waits
        rather than stop early)."""
        oldest, reached_end = self._probe(start, until)
        return oldest is not None or not reached_end

    def oldest_pending(self, start: Mapping[str, Any], until: Mapping[str, Any] | None = None) -> Change | None:
        """The first change committed after *start* (up to *until*), or None; see :meth:`pending`."""
        return self._probe(start, until)[0]

    @final
    def _probe(self, start: Mapping[str, Any], until: Mapping[str, Any] | None) -> tuple[Change | None, bool]:
        """(the first change found, whether the probe read to the end)."""
        at = dict(start)
        self.probing = True
        try:
            for _ in range(PROBE_READS):
                batch = self.read(at, PROBE_LIMIT, until)
                if batch.changes:
                    return batch.changes[0], True
                if not (batch.more or batch.extra.get("incomplete")):
                    return None, True
                if batch.offset == at:
                    break  # the source cannot move on yet (a slow server): undecided
                at = dict(batch.offset)
            return None, False
        finally:
            self.probing = False

    def drop(self) -> bool:
        """Remove server-side state kept for this consumer (a slot); True if something was removed."""
        return False

    def close(self) -> None:
        """Release connections; optional, and closing again does nothing more."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
