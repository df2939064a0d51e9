"""Whether a live sync keeps its aliases current: the rule behind ``sync --metrics-port``'s
``/healthz`` (ready) and ``/livez`` (alive).

The stream *advances* when a batch is acknowledged (also one that only moves the position past
transactions of other tables), when a reconciled gap hands it the log's position, when a
reindex's hand-over ends, and when the run's first query starts (preflight and Spark's start are
not idle time). Its *reader* answers when its query starts and whenever a trigger ends (the driver
sees the trigger idle, or a progress report Spark had not reported before). A run is **stalled**
when it has not advanced for ``stall_after_s`` while a change has waited that long in the log.
Nothing is read while the stream advances: a healthy sync costs nothing here. Past the threshold,
what tells whether changes wait is, in order:

* a batch being applied: its changes wait (for as long as it has been running);
* a reader that answered within the threshold and counted no error in it: it finds nothing new, so
  nothing waits; one that counted an error in it may be failing: not known (``unknown``). The log is
  never read beside a reader that answers: a PostgreSQL slot serves one session at a time, and a
  look would make the reader's read, or its acknowledgement, fail;
* a query whose first trigger has not ended: its reader's process starts, then reads (over a
  backlog at start); it has ``READER_START_S`` more than the threshold before it counts as silent,
  and is ``unknown`` meanwhile;
* otherwise (the reader has not answered for the threshold, or no query runs) the log itself, read
  from the acknowledged position by a change source of its own, on a thread of its own, every few
  seconds while it stays so: its oldest change not yet applied, with its commit time. A look that
  fails, or finds the slot in use (the server still decoding a read of the reader's, or another
  client), cannot tell: ``unknown``.

A request never waits for the log: it is answered from the last look.

Not ready (``healthy`` false, ``/healthz`` 503) while starting, stopping, reconciling a gap, stalled
or unknown. Not alive (``live`` false, ``/livez`` 503) only when stalled with a reader that has not
answered for the threshold while the log answers and changes wait: the stream does not read, which
a restart may cure. A long batch or a reconciliation is work a restart would only start over; a
database that does not answer is not cured by one, nor is a slot the server is still decoding a
read on; and a query that is down is started again by the sync itself (which ends, exit 3, when
that keeps failing).
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
#: how often the looking thread asks itself whether the log needs a look
LOOK_TICK_S = 0.25
#: how long a look may run before the health stops standing on the one before it
LOOK_PATIENCE_S = 15.0
#: how long the run's end waits for a look in flight (it uses the run's sources)
LOOK_JOIN_S = 15.0
#: what a query's first answer may take beyond the threshold: its reader's process starts first
#: (Spark gives it spark.python.authenticate.socketTimeout, 15 s, to connect back), then reads
READER_START_S = 15.0
#: PostgreSQL's object_in_use: the slot is being read by another session
OBJECT_IN_USE = "55006"

Status = Literal["starting", "ok", "held", "reconciling", "stalled", "unknown", "stopping", "stopped"]
STATUSES: tuple[Status, ...] = get_args(Status)
Reader = Literal["answering", "failing", "starting", "silent", "down"]


@dataclass(frozen=True)
class SyncHealth:
    """One look at a running sync (``/healthz``'s JSON body is :meth:`to_dict`)."""

    #: starting, ok, held (paused for a reindex's hand-over), reconciling, stalled, unknown (not
    #: advancing, and whether changes wait could not be told), stopping, stopped
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
    #: advanced within the threshold) or not known (the look failed, or the reader fails)
    pending: bool | None = None
    #: how long the oldest change not yet applied has waited, when the log was read for it
    oldest_pending_s: float | None = None
    batch_running: bool = False
    #: the position acknowledged last (0 before the first batch)
    position: int = 0
    stall_after_s: float = STALL_AFTER_S
    #: seconds since the stream's reader last answered (None while no query runs)
    since_reader_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Look:
    """What reading the log found, and when."""

    at: float  # when it started
    progress: float  # the stream's last advance when it was taken (a newer advance voids it)
    pending: bool | None  # None: the log could not be read
    oldest_s: float | None  # how long the oldest change had waited, when its commit time is known
    error: str | None = None
    in_use: bool = False  # the slot is being read by another session


class StreamHealth:
    """The health of one live run, read from any thread; see the module's docstring for the rule.

    Once the health is asked for while a feed is bound, a thread of its own reads the log when the
    rule needs it (a sync nobody watches never reads it); :meth:`check` never waits for the log."""

    def __init__(self, state: RunState, group: str) -> None:
        self.state = state
        self.group = group
        self._feed: Feed | None = None
        self._ended = False
        self._lock = threading.Lock()  # the bookkeeping below
        self._look: _Look | None = None
        self._looking_since: float | None = None
        self._stall_after_s: float | None = None  # the threshold the health was last asked with
        self._pending_since: tuple[float, float] | None = None  # (the advance it belongs to, when first seen)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def bind(self, feed: Feed | None) -> None:
        """The run's feed while it is open (None once it closes)."""
        with self._lock:
            self._feed, self._look = feed, None

    def _start_looking(self, stall_after_s: float) -> None:
        """The health was asked for: the looking thread runs from now until the run ends (a sync
        whose health nobody reads has none)."""
        with self._lock:
            self._stall_after_s = stall_after_s
            if self._thread is not None or self._ended or self._feed is None:
                return
            thread = self._thread = threading.Thread(target=self._looker, name="sparkindex-sync-health", daemon=True)
        thread.start()

    def end(self, timeout: float = LOOK_JOIN_S) -> None:
        """No look after this; a look in flight is waited for (up to *timeout*), since it uses the
        run's sources, which close next."""
        with self._lock:
            self._ended, self._feed = True, None
            thread, self._thread = self._thread, None  # waited for once: ending again does not wait
        self._wake.set()
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("health: a look at the change log still runs after %.0f s; the run ends without it", timeout)

    # -- the rule ----------------------------------------------------------------------------------
    def check(self, stall_after_s: float) -> SyncHealth:
        state = self.state
        now = time.monotonic()
        self._start_looking(stall_after_s)
        idle = max(0.0, now - state.last_progress)
        running = state.batch_running.is_set()
        querying = state.query_running.is_set()
        silent = max(0.0, state.query_seen_at - state.reader_answered_at)
        base: dict[str, Any] = {
            "group": self.group,
            "since_advance_s": round(idle, 3),
            "batch_running": running,
            "position": state.totals.position,
            "stall_after_s": stall_after_s,
            "since_reader_s": round(silent, 3) if querying else None,
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
        late = f"no batch acknowledged for {idle:.0f} s"
        if running:  # a batch in flight holds changes read after the last advance
            reason = f"{late} while changes wait: the batch in flight is still being applied"
            return SyncHealth("stalled", False, True, reason=reason, pending=True, **base)
        reader = self._reader(now, stall_after_s)
        if reader == "answering":
            return SyncHealth("ok", True, True, pending=False, **base)  # it looks and finds nothing new
        if reader == "failing":
            ago = now - state.reader_error_at
            reason = (
                f"{late}, and the stream's reader counted an error {ago:.0f} s ago (sync_errors_total, the "
                "sync's log): whether changes wait is not known"
            )
            return SyncHealth("unknown", False, True, reason=reason, **base)
        if reader == "starting":
            reason = (
                f"{late}, and its query's reader has not answered yet, {silent:.0f} s after the query started "
                "(its process starting, its first read): whether changes wait is not known"
            )
            return SyncHealth("unknown", False, True, reason=reason, **base)
        stuck = f"its reader has not answered for {silent:.0f} s" if reader == "silent" else "its query is not running"
        look = self._last_look(now)
        if look is None or look.pending is None:
            if look is None:
                self._wake.set()  # the looking thread reads it now
            reason = f"{late} and {stuck}: " + self._why_not_known(now, look)
            return SyncHealth("unknown", False, True, reason=reason, **base)
        oldest_s = None if look.oldest_s is None else round(look.oldest_s + (now - look.at), 3)
        if not look.pending:
            return SyncHealth("ok", True, True, pending=False, **base)
        waited = min(idle, oldest_s if oldest_s is not None else self._waited(now))
        if waited < stall_after_s:
            return SyncHealth("ok", True, True, pending=True, oldest_pending_s=oldest_s, **base)
        oldest = f" (the oldest for {oldest_s:.0f} s)" if oldest_s is not None else ""
        reason = f"{late} while changes wait{oldest}: the stream is not reading them ({stuck})"
        live = reader != "silent"  # a query that is down is started again by the sync itself
        return SyncHealth("stalled", False, live, reason=reason, pending=True, oldest_pending_s=oldest_s, **base)

    def _reader(self, now: float, stall_after_s: float) -> Reader:
        """What the stream's reader does: answers (it looked at the log within the threshold, with
        no error counted in it), fails (answers, with an error counted in it), starts (its query's
        first trigger has not ended for the threshold, but has not used up the time its process
        may take to start), is silent (has not answered for the threshold), or is down (no query
        runs: between two, after a failure)."""
        state = self.state
        if not state.query_running.is_set():
            return "down"
        silence = state.query_seen_at - state.reader_answered_at
        if state.progress_seen is None and stall_after_s <= silence < stall_after_s + READER_START_S:
            return "starting"
        if silence >= stall_after_s:
            return "silent"
        if state.reader_error_at > 0 and now - state.reader_error_at < stall_after_s:
            return "failing"
        return "answering"

    def _needs_look(self, now: float, stall_after_s: float) -> bool:
        """Whether the rule reads the log now: past the threshold, with no batch running and a
        reader that does not answer (the look never competes with a reader that reads)."""
        state = self.state
        if self._ended or not state.streaming.is_set() or state.batch_running.is_set():
            return False
        if state.stop_requested.is_set() or state.reconciling.is_set() or state.held.is_set():
            return False
        if now - state.last_progress < stall_after_s:
            return False
        return self._reader(now, stall_after_s) in ("silent", "down")

    def _last_look(self, now: float) -> _Look | None:
        """The last look if it still stands: taken since the stream last advanced and since its
        reader last answered, and not left behind by a look that takes too long."""
        with self._lock:
            look, looking = self._look, self._looking_since
        state = self.state
        if look is None or look.progress != state.last_progress or look.at < state.reader_answered_at:
            return None
        if looking is not None and now - looking >= LOOK_PATIENCE_S:
            return None  # the look in flight does not come back: the one before it is out of date
        return look

    def _why_not_known(self, now: float, look: _Look | None) -> str:
        if look is not None and look.in_use:
            return (
                f"the change log's slot is in use by another session ({look.error}): the server still decodes "
                "a read of the reader's (a large transaction, or a long one that holds the slot back), or "
                "another client reads it; a restart would not end that read"
            )
        if look is not None:
            return f"could not read the change log: {look.error}"
        with self._lock:
            looking = self._looking_since
        if looking is not None and now - looking >= LOOK_PATIENCE_S:
            return f"reading the change log has not answered for {now - looking:.0f} s"
        return "reading the change log to tell whether changes wait"

    def _waited(self, now: float) -> float:
        """Since when changes were first seen waiting after the stream's last advance (for a log
        whose changes carry no commit time)."""
        with self._lock:
            progress = self.state.last_progress
            if self._pending_since is None or self._pending_since[0] != progress:
                self._pending_since = (progress, now)
            return now - self._pending_since[1]

    # -- the looking thread --------------------------------------------------------------------------
    def _looker(self) -> None:
        """Reads the log while the rule needs it, at most once every few seconds, until the run ends."""
        while True:
            self._wake.wait(LOOK_TICK_S)
            self._wake.clear()
            with self._lock:
                feed, stall_after_s, last = self._feed, self._stall_after_s, self._look
                if self._ended:
                    return
            now = time.monotonic()
            if feed is None or stall_after_s is None or not self._needs_look(now, stall_after_s):
                continue
            every = max(0.5, min(5.0, stall_after_s / 4))
            if last is not None and last is self._last_look(now) and now - last.at < every:
                continue  # the last look stands, and is recent
            with self._lock:
                self._looking_since = now
            try:
                look = self._read_log(feed, self.state.last_progress)
            finally:
                with self._lock:
                    self._looking_since = None
            with self._lock:
                if not self._ended:
                    self._look = look

    def _read_log(self, feed: Feed, progress: float) -> _Look:
        """The oldest change after the acknowledged position, read with a change source of our own
        (its own connection), closed again at once (a binlog reader holds a server thread)."""
        from sparkindex.capture.source import open_change_source
        from sparkindex.capture.sync_errors import brief

        at = time.monotonic()
        try:
            acked = self.state.acked or feed.start_offset()
            with open_change_source(feed.pipeline, feed.source, feed.changes.tables, feed.changes.consumer) as probe:
                oldest = probe.oldest_pending(acked)
        except Exception as exc:  # noqa: BLE001 - the health says it could not look, and why
            log.debug("health: reading the change log: %s", brief(exc))
            return _Look(at, progress, None, None, error=brief(exc), in_use=_slot_in_use(exc))
        if oldest is None:
            return _Look(at, progress, False, None)
        waited = time.time() - oldest.ts if oldest.ts > 0 else None
        return _Look(at, progress, True, None if waited is None else round(max(0.0, waited), 3))


def _slot_in_use(exc: BaseException) -> bool:
    """Whether *exc*, or what it was raised from, is PostgreSQL's object_in_use (a slot read by
    another session): the change source reports it as transient, raised from the driver's error."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if getattr(cause, "sqlstate", None) == OBJECT_IN_USE:
            return True
        cause = cause.__cause__ or cause.__context__
    return False
