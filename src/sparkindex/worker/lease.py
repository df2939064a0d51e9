"""A partition claim as a lease, renewed in the background and checked before every write.

Another worker may take the partition over once its heartbeat is older than ``claim_timeout_s``,
on the store's clock. So a worker writes only while it can prove the lease is still its own:
every write (each bulk request, retries and chunks included, and each stage add) first checks
that the last successful renewal, by this process's monotonic clock, is younger than
``LEASE_SAFE_FRACTION`` of ``claim_timeout_s``; the rest of the timeout is the margin for a
request already on its way. A worker cut off from the store therefore stops writing on its own,
and its store calls stop rerunning at the same moment
(:func:`~sparkindex.coordination.base.reruns_until`).
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import DBAPIError

from sparkindex.coordination.base import reruns_until
from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LeaseExpired, LockLost, TransientError

log = logging.getLogger(__name__)

#: renewals come every quarter (at least every LEASE_RENEW_MIN_S), so one that fails costs no
#: write, and the last quarter is the margin for a request on its way and for disagreeing clocks
LEASE_SAFE_FRACTION = 0.75
LEASE_RENEW_MIN_S = 0.5


class Lease(threading.Thread):
    """Renews the claim's heartbeat while a page is read or a bulk waits, so a slow partition is
    never mistaken for a dead one; notices a takeover between acknowledgements; and tells the
    writes whether the claim can still be proven (:meth:`check`)."""

    def __init__(
        self, store: CoordinationStore, rec: PartitionRecord, claim_timeout_s: float, claimed_at: float
    ) -> None:
        super().__init__(name=f"lease-{rec.id[:8]}", daemon=True)
        self.store, self.rec = store, rec
        self.every_s = max(LEASE_RENEW_MIN_S, claim_timeout_s / 4)
        #: how long one renewal proves the claim for
        self.valid_for_s = claim_timeout_s * LEASE_SAFE_FRACTION
        self.lost: str | None = None
        #: time.monotonic() when the last store call that renewed the claim began (the heartbeat it
        #: stored is the wall clock of that moment or later); the claim is the first renewal
        self.renewed_at = claimed_at
        self._guard = threading.Lock()
        self._stop_event = threading.Event()

    def renewed(self, started: float) -> None:
        """A store call begun at *started* (monotonic) renewed the claim."""
        with self._guard:
            self.renewed_at = max(self.renewed_at, started)

    def valid_until(self) -> float:
        """The monotonic time after which the claim can no longer be proven without a renewal;
        the past once a takeover was noticed (the writes' deadline and the store's reruns end)."""
        if self.lost:
            return float("-inf")
        return self.renewed_at + self.valid_for_s

    def expired(self) -> bool:
        return time.monotonic() > self.valid_until()

    def check(self) -> None:
        """Raise :class:`LockLost` when a takeover was noticed, :class:`LeaseExpired` when the
        claim cannot be proven any more; called before every write to the target."""
        if self.lost:
            raise LockLost(self.lost)
        age = time.monotonic() - self.renewed_at
        if age > self.valid_for_s:
            raise LeaseExpired(
                f"partition {self.rec.id}: claim {self.rec.claim_token} was last renewed {age:.1f}s ago, more than "
                f"{self.valid_for_s:g}s ({LEASE_SAFE_FRACTION:g} of claim_timeout_s): another worker may own it now, "
                "so this one writes no more"
            )

    def run(self) -> None:
        with reruns_until(self.valid_until):  # a renewal that cannot prove the lease is no renewal
            while not self._stop_event.wait(self.every_s):
                started = time.monotonic()
                try:
                    self.store.partition_rows.heartbeat(self.rec.id, self.rec.claim_token)
                except LockLost as exc:
                    self.lost = str(exc)
                    return
                except (DBAPIError, TransientError) as exc:  # the store is down: the next renewal retries
                    log.warning("lease renewal for partition %s failed: %s", self.rec.id, exc)
                else:
                    self.renewed(started)

    def stop(self) -> None:
        self._stop_event.set()


__all__ = ["LEASE_SAFE_FRACTION", "Lease"]
