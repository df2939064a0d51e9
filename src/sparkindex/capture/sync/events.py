"""Errors the sync's other processes counted, shown on the driver's terminal.

The log reader and the apply tasks run in processes Spark owns, whose logs never reach the
terminal; they count their errors in the store (:mod:`sparkindex.coordination.sync_events`), and
the driver shows what is new at WARN. A bounded run whose source keeps failing without progress
gives up within its window here instead of waiting for ever.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sparkindex.capture.restarts import BOUNDED_WINDOW_S
from sparkindex.coordination.sync_events import SyncEvents
from sparkindex.errors import TransientError

log = logging.getLogger(__name__)


class EventWatching:
    """Mixed into :class:`sparkindex.capture.sync.run.SyncRun`, which provides these attributes."""

    group: str
    events: SyncEvents
    until_caught_up: bool
    until: Any
    error: BaseException | None
    stop_requested: threading.Event
    _events_seen: dict[str, int]
    _last_progress: float

    def _show_events(self) -> None:
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
            seen = self._events_seen.setdefault(kind, event.count)
            if event.count > seen:
                fresh = True
                self._events_seen[kind] = event.count
                log.warning("change capture (%s, %d so far): %s", kind, event.count, event.message)
        bounded = self.until_caught_up or self.until is not None
        if fresh and bounded and time.monotonic() - self._last_progress > BOUNDED_WINDOW_S:
            self.error = TransientError(
                f"consumer group {self.group!r}: no progress for {BOUNDED_WINDOW_S:.0f} s while the source kept "
                f"failing; last: {events[next(k for k in ('source', 'apply') if k in events)].message}"
            )
            self.stop_requested.set()
