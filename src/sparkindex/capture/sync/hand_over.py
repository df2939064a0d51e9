"""The live sync's side of the hand-over with a reindex (the reindex's side: :mod:`sparkindex.capture.catch_up`).

A reindex about to swap an alias places a hold on it; every live sync serving the alias answers
with the position it applied and pauses, the reindex catches its new version up past that
position and swaps, then releases the hold with the offsets the sync continues from.
"""

from __future__ import annotations

import logging

from sparkindex.capture.session import resolve_consumer_plan
from sparkindex.capture.sync.feed import Feed
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync_errors import brief
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import GroupOffset
from sparkindex.documents.fingerprint import plan_fingerprint
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import ConfigError, PermanentError, TransientError
from sparkindex.resources import open_source

log = logging.getLogger(__name__)


class HoldResponder:
    """Answers the holds a reindex places on the aliases a live sync serves."""

    def __init__(self, feed: Feed, state: RunState, holder: str) -> None:
        self.feed = feed
        self.state = state
        self.holder = holder
        self._was_held = False  # one of our aliases was held by a reindex at the last look

    def pause_held(self) -> bool:
        """Answer every hold on our aliases with the position we applied; True if any is held."""
        feed = self.feed
        holds = feed.store.sync_holds.holds(feed.aliases)
        if not holds:
            if self.state.held.is_set():  # released: the stream continues from the offsets handed over
                self.state.held.clear()
                self.state.advanced()
            if self._was_held:  # a hand-over just ended: the alias may point at a version of another plan
                self._was_held = not self._after_hand_over()
            return False  # the common case, polled often: no offsets read
        self._was_held = True
        self.state.held.set()  # waiting is not stalling (the run's health)
        saved = feed.positions.offsets(feed.group)
        for alias, hold in holds.items():
            if hold.paused_by != self.holder:
                mine = saved.get(alias)  # none yet: a first sync, or a gap about to be reconciled
                feed.store.sync_holds.pause(alias, hold.holder, mine.position if mine else 0, self.holder)
        return bool(holds)

    def wait(self) -> dict[str, GroupOffset]:
        """A reindex about to swap an alias holds it: pause (report where we are), wait until it
        is released, then continue from the offsets the reindex handed over."""
        while self.pause_held() and not self.state.stop_requested.wait(0.1):
            pass  # held: polling the store until the reindex releases the alias
        return self.feed.positions.offsets(self.feed.group)

    def _after_hand_over(self) -> bool:
        """A reindex just swapped one of our aliases to a version it built from the schema it
        saw. Documents this sync writes must have that version's shape: if the plans differ now
        (a column added, a relation changed), it stops and says so; a restart follows the new
        plans. True when checked (a source out of reach is checked again at the next look)."""
        p, aliases, plans = self.feed.pipeline, self.feed.aliases, self.feed.plans
        try:
            with open_source(p) as source:
                now = {a: resolve_consumer_plan(p, source, a) for a in aliases}
        except TransientError as exc:
            log.warning("checking the plans after a hand-over (checked again shortly): %s", brief(exc))
            return False
        except ConfigError as exc:
            self.state.fail(exc)
            return True
        changed = [a for a in now if _shape(a, now[a], p) != _shape(a, plans[a], p)]
        if changed:
            self.state.fail(
                PermanentError(
                    f"alias(es) {', '.join(changed)} were rebuilt by a reindex from another plan than this sync's (the "
                    "schema changed since the sync started); the sync stopped so as not to write documents of the "
                    "old shape into the new version: start it again to follow the new plan"
                )
            )
        return True


def _shape(alias: str, plan: IndexPlan, pipeline: Pipeline) -> str:
    """What decides the documents of *alias* under *plan* (the reindex's fingerprint of it)."""
    return plan_fingerprint({alias: (plan, None)}, pipeline)
