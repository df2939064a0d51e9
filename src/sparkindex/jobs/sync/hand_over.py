"""The live sync's side of the hand-over with a reindex (the reindex's side: :mod:`sparkindex.jobs.catch_up`).

A reindex about to swap an alias places a hold on it; every live sync serving the alias answers
with the position it applied and pauses, the reindex catches its new version up past that
position and swaps, then releases the hold with the offsets the sync continues from.
"""

from __future__ import annotations

import threading

from sparkindex.coordination.offsets import ConsumerOffsets, GroupOffset, OffsetStore


class HoldAnswering:
    """Mixed into :class:`sparkindex.jobs.sync.run.SyncRun`, which provides these attributes."""

    group: str
    aliases: list[str]
    lock: bool
    holder: str
    hold_owner: str | None
    offsets: OffsetStore
    positions: ConsumerOffsets
    stop_requested: threading.Event

    def _pause_held(self) -> bool:
        """Answer every hold on our aliases with the position we applied; True if any is held."""
        if self.lock is False:
            return False  # a catch-up: it is the holder, not a live sync
        holds = {a: h for a, h in self.offsets.holds(self.aliases).items() if h.holder != self.hold_owner}
        if not holds:
            return False  # the common case, polled often: no offsets read
        saved = self.positions.offsets(self.group)
        for alias, hold in holds.items():
            if hold.paused_by != self.holder:
                mine = saved.get(alias)  # none yet: a first sync, or a gap about to be reconciled
                self.offsets.pause(alias, hold.holder, mine.position if mine else 0, self.holder)
        return bool(holds)

    def _wait_for_holds(self) -> dict[str, GroupOffset]:
        """A reindex about to swap an alias holds it: pause (report where we are), wait until it
        is released, then continue from the offsets the reindex handed over."""
        while self._pause_held() and not self.stop_requested.wait(0.1):
            pass  # held: polling the store until the reindex releases the alias
        return self.positions.offsets(self.group)
