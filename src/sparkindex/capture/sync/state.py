"""What the parts of one stream run share while it runs: whether to stop and why, the position
acknowledged last, and the running totals.

The stream, its sink, the gap healer and the event watcher are separate objects; each is handed
this one record instead of reaching into another's attributes. Spark's foreachBatch calls the
sink on a thread of its own, so the flags that cross threads are events. The run's health
(:mod:`.health`) is read from yet another thread (a scrape of ``sync --metrics-port``): it only
reads this record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkindex.capture.sync.summary import SyncSummary


@dataclass
class RunState:
    totals: SyncSummary
    #: set by a signal, ``sparkindex stop``, a lost lock or a permanent error: the run ends after its batch
    stop_requested: threading.Event = field(default_factory=threading.Event)
    #: set once a streaming query runs
    streaming: threading.Event = field(default_factory=threading.Event)
    #: set while a streaming query runs (cleared between a failed query and the next)
    query_running: threading.Event = field(default_factory=threading.Event)
    #: set while the sink applies a batch (a hold, or the end of a bounded run, waits for it)
    batch_running: threading.Event = field(default_factory=threading.Event)
    #: set while a gap in the log is reconciled (verify and repair on Spark)
    reconciling: threading.Event = field(default_factory=threading.Event)
    #: set while a reindex holds one of the run's aliases for its hand-over (the run waits)
    held: threading.Event = field(default_factory=threading.Event)
    #: what ends the run with an error once the stream is down
    error: BaseException | None = None
    #: why the sink gave the current query up (the store out of reach): the query is ended and
    #: started again from the acknowledged position, never raised back through Py4J
    sink_failure: str | None = None
    #: the source offset acknowledged last (None: read the stored offsets)
    acked: dict[str, Any] | None = None
    #: a bounded run's head, recorded at its start
    until_head: dict[str, Any] | None = None
    #: a bounded run that found nothing more up to that head
    caught_up: bool = False
    #: the commit time of the last change acknowledged, for the lag reported
    last_ts: float = 0.0
    #: when the stream last advanced: a batch acknowledged, a gap reconciled, a hand-over ended, or
    #: the run's first query started (preflight and Spark's start are not idle time); a bounded run
    #: gives up after a window without progress; the health's stall clock
    last_progress: float = field(default_factory=time.monotonic)
    #: when the stream's reader last answered, as the driver saw it: its query started, a trigger
    #: ended (seen idle, or a progress Spark reported), so it looked at the log and came back
    reader_answered_at: float = field(default_factory=time.monotonic)
    #: when the driver last looked at the query: the reader's silence is known up to here (the
    #: driver stops looking while it is busy elsewhere, e.g. the daily deferred refresh)
    query_seen_at: float = field(default_factory=time.monotonic)
    #: when the driver last saw a new error counted by the log reader or the apply tasks
    reader_error_at: float = 0.0
    #: the last progress Spark reported for the query, as (batch id, timestamp); None until its
    #: first trigger ended (its reader's process started and read once)
    progress_seen: tuple[Any, Any] | None = None
    #: called with the position after every acknowledged batch (the benchmark's clock)
    on_ack: Callable[[int], None] | None = None

    def advanced(self) -> None:
        """The stream moved on (or was handed a position to continue from): the stall clock restarts."""
        self.last_progress = time.monotonic()

    def query_started(self) -> None:
        """A streaming query started (the run's first, or one started again after a failure): its
        reader starts answering from here; the run's first also starts the stall clock."""
        now = time.monotonic()
        if not self.streaming.is_set():
            self.last_progress = now
        self.reader_answered_at = self.query_seen_at = now
        self.progress_seen = None
        self.streaming.set()
        self.query_running.set()

    def saw_query(self, trigger_active: bool, progress: tuple[Any, Any] | None = None) -> None:
        """What the driver saw of the query at one look: a progress report not seen before (Spark
        reports one per trigger that ran a batch, and one every 10 s while it finds nothing), or,
        once the first trigger has ended, a trigger not active, is a reader that answers.
        Back-to-back triggers look active at every look; their reports tell them from one trigger
        that does not end. Before the first report the query may not have triggered yet."""
        now = time.monotonic()
        news = progress is not None and progress != self.progress_seen
        if news or (not trigger_active and self.progress_seen is not None):
            self.reader_answered_at = now
        if progress is not None:
            self.progress_seen = progress
        self.query_seen_at = now

    def fail(self, error: BaseException) -> None:
        """End the run with *error* after the batch in flight."""
        self.error = error
        self.stop_requested.set()
