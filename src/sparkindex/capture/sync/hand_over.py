"""The live sync's side of the hand-over with a reindex (the reindex's side: :mod:`sparkindex.capture.catch_up`).

A reindex about to swap an alias places a hold on it; every live sync serving the alias answers
with the position it applied and pauses, the reindex catches its new version up past that
position and swaps, then releases the hold with the offsets the sync continues from.
"""

from __future__ import annotations

import logging
import threading

from sparkindex.capture.session import resolve_consumer_plan
from sparkindex.capture.sync_errors import brief
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import ConsumerOffsets, GroupOffset
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.fingerprint import plan_fingerprint
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import ConfigError, PermanentError, TransientError
from sparkindex.sources.registry import open_source

log = logging.getLogger(__name__)


class HoldAnswering:
    """Mixed into :class:`sparkindex.capture.sync.run.SyncRun`, which provides these attributes."""

    group: str
    aliases: list[str]
    lock: bool
    holder: str
    hold_owner: str | None
    store: CoordinationStore
    positions: ConsumerOffsets
    stop_requested: threading.Event
    _was_held: bool

    pipeline: Pipeline
    plans: dict[str, IndexPlan]
    error: BaseException | None

    def _pause_held(self) -> bool:
        """Answer every hold on our aliases with the position we applied; True if any is held."""
        if self.lock is False:
            return False  # a catch-up: it is the holder, not a live sync
        holds = {a: h for a, h in self.store.sync_holds.holds(self.aliases).items() if h.holder != self.hold_owner}
        if not holds:
            if self._was_held:  # a hand-over just ended: the alias may point at a version of another plan
                self._was_held = not self._after_hand_over()
            return False  # the common case, polled often: no offsets read
        self._was_held = True
        saved = self.positions.offsets(self.group)
        for alias, hold in holds.items():
            if hold.paused_by != self.holder:
                mine = saved.get(alias)  # none yet: a first sync, or a gap about to be reconciled
                self.store.sync_holds.pause(alias, hold.holder, mine.position if mine else 0, self.holder)
        return bool(holds)

    def _wait_for_holds(self) -> dict[str, GroupOffset]:
        """A reindex about to swap an alias holds it: pause (report where we are), wait until it
        is released, then continue from the offsets the reindex handed over."""
        while self._pause_held() and not self.stop_requested.wait(0.1):
            pass  # held: polling the store until the reindex releases the alias
        return self.positions.offsets(self.group)

    def _after_hand_over(self) -> bool:
        """A reindex just swapped one of our aliases to a version it built from the schema it
        saw. Documents this sync writes must have that version's shape: if the plans differ now
        (a column added, a relation changed), it stops and says so; a restart follows the new
        plans. True when checked (a source out of reach is checked again at the next look)."""
        p = self.pipeline
        try:
            source = open_source(p.source_url(), p.job.source_timeout_s)
            try:
                now = {a: resolve_consumer_plan(p, source, a) for a in self.aliases}
            finally:
                source.close()
        except TransientError as exc:
            log.warning("checking the plans after a hand-over (checked again shortly): %s", brief(exc))
            return False
        except ConfigError as exc:
            self.error, now = exc, {}
        changed = [a for a in now if _shape(a, now[a], p) != _shape(a, self.plans[a], p)]
        if changed:
            self.error = PermanentError(
                f"alias(es) {', '.join(changed)} were rebuilt by a reindex from another plan than this sync's (the "
                "schema changed since the sync started); the sync stopped so as not to write documents of the old "
                "shape into the new version: start it again to follow the new plan"
            )
        if self.error is not None:
            self.stop_requested.set()
        return True


def _shape(alias: str, plan: IndexPlan, pipeline: Pipeline) -> str:
    """What decides the documents of *alias* under *plan* (the reindex's fingerprint of it)."""
    return plan_fingerprint({alias: (plan, None)}, pipeline)
