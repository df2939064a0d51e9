"""Whether a live sync keeps its aliases current: the rule behind ``sync --metrics-port``'s
``/healthz`` (ready) and ``/livez`` (alive).

The stream *advances* when a batch is acknowledged (also one that only moves the position past
transactions of other tables), when a reconciled gap hands it the log's position, and when a
reindex's hand-over ends. A run is **stalled** when it has not advanced for ``stall_after_s``
while a change has waited that long in the log. Nothing is probed while the stream advances: a
healthy sync costs nothing here. Past the threshold, what tells whether changes wait is, in order:

* a batch being applied: its changes wait (for as long as it has been running);
* a query whose reader keeps answering (its trigger is not held active, and it counted no error
  since the stream last advanced): it finds nothing new, so nothing waits;
* otherwise the log itself, read from the acknowledged position with a change source of its own
  (its oldest change not yet applied, with its commit time), at most once per probe interval.
  The reader is then stuck, failing or not running, so the look does not compete with a working
  reader for the log (a PostgreSQL slot serves one session at a time).

Not ready (``healthy`` false, ``/healthz`` 503) while starting, stopping, reconciling a gap or
stalled. Not alive (``live`` false, ``/livez`` 503) only when stalled with no batch running: the
stream is not reading, which a restart may cure; a long batch or a reconciliation is work a
restart would only start over.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from sparkindex.capture.sync.state import RunState

if TYPE_CHECKING:
    from sparkindex.capture.sync.feed import Feed

log = logging.getLogger(__name__)

#: the default of ``sync --stall-after-s`` (the CLI's help says why this value)
STALL_AFTER_S = 120.0
#: a trigger active this long with no batch running is a reader that does not answer
TRIGGER_STUCK_S = 2.0

Status = Literal["starting", "ok", "held", "reconciling", "stalled", "stopping", "stopped"]
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclass(frozen=True)
class SyncHealth:
    """One look at a running sync (``/healthz``'s JSON body is :meth:`to_dict`)."""

    #: starting, ok, held (paused for a reindex's hand-over), reconciling, stalled, stopping, stopped
    status: Status
    #: ready: the aliases are kept current (``/healthz`` 200)
    healthy: bool
    #: alive: not stuck in a way a restart may cure (``/livez`` 200)
    live: bool
    group: str
    #: why it is not ok, in one line
    reason: str | None = None
    #: seconds since the stream last advanced (None before it started)
    since_advance_s: float | None = None
    #: whether changes wait after the acknowledged position: None when not looked at (the stream
    #: advanced within the threshold, or the look failed)
    pending: bool | None = None
    #: how long the oldest change not yet applied has waited, when the log was read for it
    oldest_pending_s: float | None = None
    batch_running: bool = False
    #: the position acknowledged last (0 before the first batch)
    position: int = 0
    stall_after_s: float = STALL_AFTER_S

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Look:
    """What reading the log found, and when."""

    at: float
    progress: float  # the stream's last advance when it was taken (a newer advance voids it)
    pending: bool | None
    oldest_s: float | None
    note: str | None


class StreamHealth:
    """The health of one live run, read from any thread; see the module's docstring for the rule."""

    def __init__(self, state: RunState, group: str) -> None:
        self.state = state
        self.group = group
        self._feed: Feed | None = None
        self._ended = False
        self._lock = threading.Lock()  # the bookkeeping below
        self._probing = threading.Lock()  # one look at the log at a time; the others use the last
        self._look: _Look | None = None
        self._pending_since: tuple[float, float] | None = None  # (the advance it belongs to, when first seen)

    def bind(self, feed: Feed | None) -> None:
        """The run's feed while it is open (None once it closes)."""
        with self._lock:
            self._feed = feed
            self._look = None

    def end(self) -> None:
        with self._lock:
            self._ended, self._feed = True, None

    def check(self, stall_after_s: float) -> SyncHealth:
        state = self.state
        now = time.monotonic()
        idle = max(0.0, now - state.last_progress)
        running = state.batch_running.is_set()
        base: dict[str, Any] = {
            "group": self.group,
            "since_advance_s": round(idle, 3),
            "batch_running": running,
            "position": state.totals.position,
            "stall_after_s": stall_after_s,
        }
        if self._ended:
            return SyncHealth("stopped", False, True, reason="the sync has ended", **base)
        if state.stop_requested.is_set():
            return SyncHealth("stopping", False, True, reason="stopping after the batch in flight", **base)
        if state.reconciling.is_set():
            reason = "reconciling a gap in the change log (verify and repair on Spark); streaming resumes after it"
            return SyncHealth("reconciling", False, True, reason=reason, **base)
        if not state.streaming.is_set() or self._feed is None:
            base["since_advance_s"] = None
            return SyncHealth("starting", False, True, reason="the change stream has not started yet", **base)
        if state.held.is_set():
            return SyncHealth("held", True, True, reason="paused while a reindex hands an alias over", **base)
        if idle < stall_after_s:
            return SyncHealth("ok", True, True, **base)
        pending, oldest_s, note = (True, None, None) if running else self._pending(now, stall_after_s)
        if not pending:
            return SyncHealth("ok", True, True, reason=note, pending=pending, **base)
        # a batch in flight holds changes read after the last advance; else the oldest's commit time
        waited = idle if running else min(idle, oldest_s if oldest_s is not None else self._waited(now))
        if waited < stall_after_s:
            return SyncHealth("ok", True, True, pending=True, oldest_pending_s=oldest_s, **base)
        oldest = f" (the oldest for {oldest_s:.0f} s)" if oldest_s is not None else ""
        reason = f"no batch acknowledged for {idle:.0f} s while changes wait{oldest}: " + (
            "the batch in flight is still being applied"
            if running
            else "the stream is not reading them (its reader does not answer, fails, or its query is down)"
        )
        return SyncHealth("stalled", False, running, reason=reason, pending=True, oldest_pending_s=oldest_s, **base)

    # -- whether changes wait ----------------------------------------------------------------------
    def _pending(self, now: float, stall_after_s: float) -> tuple[bool | None, float | None, str | None]:
        """With no batch running: (whether changes wait, how long the oldest has, a note when the
        log could not be read)."""
        state = self.state
        since = state.trigger_active_since
        stuck = since is not None and now - since >= TRIGGER_STUCK_S
        failing = state.reader_error_at > state.last_progress
        if state.query_running.is_set() and not stuck and not failing:
            return False, None, None  # the reader keeps looking and finds nothing new
        look = self._look_at_log(now, stall_after_s)
        oldest_s = None if look.oldest_s is None else round(look.oldest_s + (now - look.at), 3)
        return look.pending, oldest_s, look.note

    def _waited(self, now: float) -> float:
        """Since when changes were first seen waiting after the stream's last advance (for a log
        whose changes carry no commit time)."""
        with self._lock:
            progress = self.state.last_progress
            if self._pending_since is None or self._pending_since[0] != progress:
                self._pending_since = (progress, now)
            return now - self._pending_since[1]

    def _look_at_log(self, now: float, stall_after_s: float) -> _Look:
        every = max(0.5, min(5.0, stall_after_s / 4))
        with self._lock:
            last, feed, progress = self._look, self._feed, self.state.last_progress
        current = last if last is not None and last.progress == progress else None  # taken since the last advance
        if current is not None and now - current.at < every:
            return current
        if not self._probing.acquire(blocking=current is None):  # only a look to fall back on may skip the wait
            assert current is not None
            return current  # another thread is looking right now: the last look stands meanwhile
        try:
            look = self._read_log(feed, progress)
        finally:
            self._probing.release()
        with self._lock:
            self._look = look
        return look

    def _read_log(self, feed: Feed | None, progress: float) -> _Look:
        """The oldest change after the acknowledged position, read with a change source of our own
        (its own connection), closed again at once (a binlog reader holds a server thread)."""
        from sparkindex.capture.source import open_change_source
        from sparkindex.capture.sync_errors import brief

        at = time.monotonic()
        if feed is None:
            return _Look(at, progress, None, None, "the run's sources are closed")
        try:
            acked = self.state.acked or feed.start_offset()
            with open_change_source(feed.pipeline, feed.source, feed.changes.tables, feed.changes.consumer) as probe:
                oldest = probe.oldest_pending(acked)
        except Exception as exc:  # noqa: BLE001 - the health says it could not look, and why
            log.debug("health: reading the change log: %s", brief(exc))
            return _Look(at, progress, None, None, f"could not read the change log: {brief(exc)}")
        if oldest is None:
            return _Look(at, progress, False, None, None)
        waited = time.time() - oldest.ts if oldest.ts > 0 else None
        return _Look(at, progress, True, None if waited is None else round(max(0.0, waited), 3), None)
