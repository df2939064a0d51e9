"""Errors the sync's other processes counted, shown on the driver's terminal.

The log reader and the apply tasks run in processes Spark owns, whose logs never reach the
terminal; they count their errors in the store (:mod:`sparkindex.coordination.sync_events`), and
the driver shows what is new at WARN. A bounded run whose source keeps failing without progress
gives up within its window here instead of waiting for ever.
"""

from __future__ import annotations

import logging
import time

from sparkindex.capture.restarts import BOUNDED_WINDOW_S
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync_errors import brief
from sparkindex.coordination.sync_events import SyncEvents
from sparkindex.errors import TransientError

log = logging.getLogger(__name__)


class EventWatcher:
    """Counts the driver's own errors in the store and shows those the other processes counted."""

    def __init__(self, events: SyncEvents, group: str, state: RunState, *, bounded: bool) -> None:
        self.events = events
        self.group = group
        self.state = state
        self.bounded = bounded
        #: the error events already shown on the terminal: the count per kind
        self._seen: dict[str, int] = {}

    def count(self, kind: str, message: str) -> None:
        """Count an error where the server's metrics see it; a store that is down must not turn
        a retried failure into the end of the sync."""
        try:
            self.events.record(self.group, kind, message)
        except Exception as exc:  # noqa: BLE001 - counting is best effort; the failure itself is logged by the caller
            log.warning("could not count a %s error in the store: %s", kind, exc)

    def record_end(self, error: BaseException) -> None:
        """Record the error that ends the run, for the metrics and the server's page; the store
        may be what failed, and the error itself is raised by the runner either way."""
        try:
            self.events.record(self.group, "permanent", brief(error))
        except Exception as exc:  # noqa: BLE001 - the run's own error must be the one raised
            log.warning("could not record the error that ended the run of group %r: %s", self.group, brief(exc))

    def show(self) -> None:
        """Errors counted by the log reader and the apply tasks (processes Spark owns, whose logs
        never reach this terminal) are shown here at WARN; a bounded run whose source keeps
        failing without progress gives up within its window instead of waiting for ever."""
        try:
            events = {e.kind: e for e in self.events.events(self.group)}
        except Exception as exc:  # noqa: BLE001 - the store is down: the next look may succeed
            log.debug("reading sync events: %s", exc)
            return
        fresh = False
        for kind in ("source", "apply"):
            event = events.get(kind)
            if event is None:
                continue
            seen = self._seen.setdefault(kind, event.count)
            if event.count > seen:
                fresh = True
                self.state.reader_error_at = time.monotonic()
                self._seen[kind] = event.count
                log.warning("change capture (%s, %d so far): %s", kind, event.count, event.message)
        if fresh and self.bounded and time.monotonic() - self.state.last_progress > BOUNDED_WINDOW_S:
            last = events[next(k for k in ("source", "apply") if k in events)].message
            self.state.fail(
                TransientError(
                    f"consumer group {self.group!r}: no progress for {BOUNDED_WINDOW_S:.0f} s while the source kept "
                    f"failing; last: {last}"
                )
            )
