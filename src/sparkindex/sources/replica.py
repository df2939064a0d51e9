"""A read replica and its primary: has the replica replayed what the primary had committed?

A full reindex, verify and repair may read rows from a replica (``source.read_url``) to spare the
primary. A replica is behind by its replay lag, and a snapshot read there must not be older than
the position the job starts from: a reindex's catch-up replays the log from P0 on, so a partition
read before the replica reached P0 would lose the changes in between for good, and verify would
report rows the primary already has as missing or stale. So before the first read, the job takes
the primary's current position (which is at or past P0) and waits until the replica has replayed
it, for at most ``source.max_replica_lag_s``; a replica still behind then is refused, never read.

One small interface here (:class:`ReplicaLink`), one implementation per database kind beside its
source (``postgres/replica.py``: WAL LSNs; ``mysql/replica.py``: MariaDB GTIDs), chosen by
:func:`sparkindex.sources.registry.replica_link` (the one module that knows every dialect).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.retry import Backoff
from sparkindex.sources.base import Source

log = logging.getLogger(__name__)

#: the polls' backoff: short first (a replica a few milliseconds behind is the common case)
POLL_INITIAL_S = 0.02
POLL_MAX_S = 0.5

#: replicas already reported as primaries, by URL (said once per process, not once per task)
_REPORTED_PRIMARIES: set[str] = set()


class ReplicaBehind(ConfigError):
    """The replica did not replay the primary's position within ``source.max_replica_lag_s``:
    refused (exit 2) rather than read, since its rows would be older than the job's start."""


class NotThePrimarysReplica(ConfigError):
    """``source.read_url`` names a server that does not receive the primary's changes (a
    replica of another server, or another server altogether): refused (exit 2), never read."""


@dataclass(frozen=True)
class ReplicaStatus:
    """What the replica says of itself: whether it replays another server's log at all, the
    position it has replayed, how far behind it is in words (for logs, errors and check), and in
    seconds where the server can tell (0 when it has replayed the position asked about); and
    *stalled*, why it will not catch up by itself (replay paused, replication threads stopped or
    failed), else empty: such a replica's lag in seconds may say nothing (MariaDB reports none
    while its SQL thread is stopped)."""

    is_replica: bool
    replayed: str
    behind: str
    lag_s: float | None
    stalled: str = ""


class ReplicaLink(ABC):
    """A replica (*replica*) of the primary (*primary*), both open as sources."""

    def __init__(self, primary: Source, replica: Source) -> None:
        self.primary = primary
        self.replica = replica

    @abstractmethod
    def primary_position(self) -> str:
        """The primary's current log position (what it had committed by now, at least)."""

    @abstractmethod
    def status(self, position: str) -> ReplicaStatus:
        """The replica's state, and how far it is behind *position* (a primary position)."""

    @abstractmethod
    def follows_primary(self) -> bool | None:
        """Whether the replica replicates from this primary (None: it cannot be told cheaply)."""

    @abstractmethod
    def is_primary(self) -> bool:
        """Whether the server read is provably the primary itself (not merely a server that
        replicates from nobody: that may be another database's primary, or a promoted copy
        that no longer receives the primary's writes)."""

    @abstractmethod
    def reached(self, position: str, timeout_s: float) -> bool:
        """Whether the replica has replayed *position*, waiting up to *timeout_s* where the server
        can wait itself (else answering at once)."""


def wait_for_replica(link: ReplicaLink, max_lag_s: float, why: str) -> None:
    """Return once the link's replica has replayed everything its primary has committed now;
    raise :class:`ReplicaBehind` when it has not within *max_lag_s*. *why* names the job, for the
    log. (:func:`sparkindex.sources.registry.replica_link` makes the link for a pair of sources.)

    A replica of another server is refused at once: its rows are another database's. A server
    that replays no log and has not reached the position is read without a wait only when it
    is provably the primary itself (``read_url`` naming the primary, say through another
    address); any other such server (another primary, a promoted copy) never receives what the
    primary commits, so waiting for it is pointless and reading it would lose those changes."""
    replica = link.replica
    where = redact_url(replica.url)
    if link.follows_primary() is False:
        raise NotThePrimarysReplica(
            f"source.read_url: {where} replicates from another server than source.url: its rows are "
            "another database's; nothing was read from it. Point source.read_url at a replica of source.url"
        )
    position = link.primary_position()
    if link.reached(position, 0):
        return
    first = link.status(position)
    if not first.is_replica:
        if not link.is_primary():
            raise NotThePrimarysReplica(
                f"source.read_url: {where} is not a replica (it replays no primary's log) and has not "
                f"reached the primary's position {position}: it is not source.url's server, so it would "
                "never have the primary's changes; nothing was read from it. Point source.read_url at a "
                "replica of source.url, or remove it to read the primary"
            )
        if where not in _REPORTED_PRIMARIES:
            _REPORTED_PRIMARIES.add(where)
            log.info("source.read_url %s is the primary itself: read as it is", where)
        return
    log.info(
        "%s: waiting for the replica source.read_url %s to replay the primary's position %s "
        "(replayed %s, %s; up to source.max_replica_lag_s = %gs)",
        why,
        redact_url(replica.url),
        position,
        first.replayed,
        first.behind,
        max_lag_s,
    )
    started = time.monotonic()
    backoff = Backoff(POLL_INITIAL_S, POLL_MAX_S, jitter=0.2, deadline_s=max_lag_s)
    while not backoff.expired():
        if link.reached(position, backoff.next_delay()):
            log.info(
                "%s: the replica replayed position %s after %.1fs; reading from it",
                why,
                position,
                time.monotonic() - started,
            )
            return
    last = link.status(position)
    raise ReplicaBehind(
        f"source.read_url: the replica {redact_url(replica.url)} did not replay the primary's position "
        f"{position} within source.max_replica_lag_s = {max_lag_s:g}s (it replayed {last.replayed}: "
        f"{last.behind}); nothing was read from it. Wait for it to catch up (is replay paused or "
        "replication broken?), raise source.max_replica_lag_s, or remove source.read_url to read the primary"
    )
