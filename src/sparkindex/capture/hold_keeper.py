"""Keeping a reindex's holds alive while it needs them (like :mod:`.keeper` for alias locks).

A hold pauses the live syncs of an alias while a reindex catches its new version up and swaps
it (:mod:`sparkindex.capture.catch_up`). It is a lease (:mod:`sparkindex.coordination.holds`): this
keeper renews it every few seconds from placing it until releasing it, so a reindex that dies in
between (SIGKILL, a lost machine) leaves syncs paused for one lease at most. A renewal the store
refuses (the hold expired or was replaced) means a sync may have carried on: the hold is lost,
and :meth:`HoldKeeper.check` refuses the swap. A store that cannot be reached is retried at the
next tick, until the lease would have run out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError

from sparkindex.coordination.holds import HOLD_TTL_S, SyncHolds
from sparkindex.errors import SparkIndexError, TransientError

log = logging.getLogger(__name__)

#: How often the holds are renewed (a sixth of their lease: five renewals may fail in a row).
HOLD_RENEW_S = 5.0


class HoldKeeper:
    def __init__(
        self,
        holds: SyncHolds,
        aliases: Sequence[str],
        holder: str,
        ttl_s: float = HOLD_TTL_S,
        every_s: float = HOLD_RENEW_S,
    ) -> None:
        self.holds = holds
        self.aliases = list(aliases)
        self.holder = holder
        self.ttl_s = ttl_s
        self.every_s = every_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkindex-hold-keeper", daemon=True)

    def start(self) -> None:
        """Place the holds and keep them alive."""
        for alias in self.aliases:
            self.holds.hold(alias, self.holder, self.ttl_s)
        self._thread.start()

    def _run(self) -> None:
        renewed = time.monotonic()  # the holds are ours until ttl_s after the last accepted renewal
        while self.lost is None and not self._stop.wait(self.every_s):
            started = time.monotonic()
            try:
                self._renew()
                renewed = started
            except (SQLAlchemyError, TransientError, OSError) as exc:
                down_s = time.monotonic() - renewed
                log.warning("renewing the holds on %s failed (%.1f s since the last): %s", self.aliases, down_s, exc)
                if down_s >= self.ttl_s:
                    self.lost = f"holds on {', '.join(self.aliases)}: not renewed for {down_s:.0f} s, past their lease"
            except Exception as exc:  # a bug here must not pass for a held alias
                log.exception("the hold keeper stopped on an unexpected error")
                self.lost = f"holds on {', '.join(self.aliases)}: the keeper stopped on {exc!r}"

    def _renew(self) -> None:
        held = self.holds.renew_holds(self.aliases, self.holder, self.ttl_s)
        gone = [a for a in self.aliases if a not in held]
        if gone and self.lost is None:
            self.lost = (
                f"the hold on alias(es) {', '.join(gone)} expired or was replaced; a live sync may have applied "
                "changes meanwhile"
            )

    def check(self) -> None:
        """Renew now and refuse (TransientError: a rerun resumes) when a hold is no longer ours:
        called right before each swap, so the lease has its full length ahead of it."""
        if self.lost is None:
            self._renew()
        if self.lost is not None:
            raise TransientError(f"{self.lost}; the alias was not swapped (rerun to resume)")

    def release(self) -> None:
        """Stop renewing and remove the holds. A store that cannot be reached is not an error
        here (this runs in ``finally`` blocks): the holds then end with their lease."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for alias in self.aliases:
            try:
                self.holds.release(alias, self.holder)
            except (SQLAlchemyError, SparkIndexError, OSError) as exc:
                log.warning("releasing the hold on %s failed (it expires within %.0f s): %s", alias, self.ttl_s, exc)
