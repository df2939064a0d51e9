"""The streaming loop both runners share: one Structured Streaming query at a time, started again
from the acknowledged position when it fails, until stopped, caught up or given up.

A live sync (:mod:`.run`) and a reindex's catch-up (:mod:`sparkindex.capture.catch_up_round`)
differ in what they add around it: a lock, holds answered and gaps reconciled for the one; fixed
versions, a stop position and gaps refused for the other. They hand those in as collaborators and
callbacks; the loop itself decides only when a query ends and when another starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from sqlalchemy.exc import DBAPIError

from sparkindex.capture.restarts import BOUNDED_WINDOW_S, WINDOW_S, StreamRestarts
from sparkindex.capture.sync.events import EventWatcher
from sparkindex.capture.sync.feed import Feed
from sparkindex.capture.sync.gaps import GapHealer
from sparkindex.capture.sync.sink import BatchSink
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync.summary import SyncSummary
from sparkindex.capture.sync_errors import brief
from sparkindex.errors import LogGap, PermanentError, SparkIndexError, TransientError

log = logging.getLogger(__name__)

#: how often the driver looks for errors the log reader and the apply tasks counted
EVENTS_CHECK_S = 1.0
#: how often, while a trigger is active, the driver reads the query's last progress report
PROGRESS_CHECK_S = 1.0


class ChangeStream:
    """Streams a :class:`Feed`'s changes through a :class:`BatchSink` until the run ends."""

    def __init__(
        self,
        feed: Feed,
        state: RunState,
        *,
        sink: BatchSink,
        gaps: GapHealer,
        watcher: EventWatcher,
        spark: Callable[[], Any],
        run_id: str,
        until_caught_up: bool,
        runs_deferred: bool = False,
        idle: Callable[[], None] | None = None,
    ) -> None:
        self.feed = feed
        self.state = state
        self.sink = sink
        self.gaps = gaps
        self.watcher = watcher
        self.spark = spark
        self.run_id = run_id
        #: stop at the head recorded at the start (``--until-caught-up``, and every catch-up round)
        self.until_caught_up = until_caught_up
        #: the runner's idle step may run the daily deferred refresh, which needs a query running
        self.runs_deferred = runs_deferred
        #: what the runner does between two looks at the query (answer holds, keep its presence)
        self.idle = idle or (lambda: None)

    # -- the run -------------------------------------------------------------------------------------
    def run(self, initial: dict[str, Any], checkpoint: str) -> None:
        """Stream from *initial*; a query that fails (a Python worker that could not start, a lost
        executor) is started again from the acknowledged position, with backoff, until it keeps
        failing without progress (:mod:`sparkindex.capture.restarts`)."""
        state, feed = self.state, self.feed
        self.state.until_head = feed.changes.head() if self.until_caught_up else None
        restarts = StreamRestarts(
            feed.pipeline.job.backoff_initial_s,
            feed.pipeline.job.backoff_max_s,
            window_s=BOUNDED_WINDOW_S if self.until_caught_up else WINDOW_S,
        )
        attempt = 0
        try:
            if self._nothing_to_stream():
                return
            while True:
                attempt += 1
                batches = state.totals.batches
                try:
                    failure = self._query(initial, f"{checkpoint}/{attempt}", attempt)
                except Exception as exc:
                    if state.stop_requested.is_set():
                        # stopped by a signal (the JVM may have had one too) or a lost lock: the
                        # batch in flight was not acknowledged; a rerun applies it
                        log.info("the stream ended while stopping: %s", brief(exc))
                        return
                    if isinstance(exc, SparkIndexError) and not isinstance(exc, TransientError | LogGap):
                        raise
                    failure = brief(exc)
                if failure is None or state.error is not None or state.stop_requested.is_set():
                    return
                self.watcher.count("restart", failure)
                try:
                    if self.gaps.heal():  # the failure was the log's (a slot gone, binlogs purged)
                        initial = feed.start_offset()
                        continue
                except (TransientError, DBAPIError) as exc:  # the source or the store is down: back off
                    failure = f"{failure}; checking the log: {brief(exc)}"
                pause = restarts.failed(progressed=state.totals.batches > batches)
                if pause is None:
                    state.error = PermanentError(
                        f"the change stream failed {restarts.failures} times in a row without progress "
                        f"over {restarts.window_s:.0f} s or more; last: {failure}"
                    )
                    return
                log.warning(
                    "the change stream failed (%s, %d in a row); starting it again from the acknowledged position",
                    failure,
                    restarts.failures,
                )
                try:
                    initial = dict(state.acked or feed.start_offset())
                except (TransientError, DBAPIError) as exc:  # the store is down: start where the last query did
                    log.warning("reading the acknowledged position (the next attempt reads it again): %s", brief(exc))
                state.stop_requested.wait(pause)
        finally:
            state.stop_requested.set()

    def _query(self, initial: dict[str, Any], checkpoint: str, attempt: int) -> str | None:
        """One streaming query until stopped, caught up or failed; returns why it failed, if it did."""
        from sparkindex.capture.stream import StreamSpec, register_change_source

        feed, state = self.feed, self.state
        spark = self.spark()
        state.sink_failure = None
        wire = feed.pipeline.wire_string()
        fmt = register_change_source(spark, wire, f"{self.run_id}_{attempt}")
        tables = [{"name": t.name, "link_columns": t.link_columns, "where": t.where} for t in feed.changes.tables]
        spec = StreamSpec(
            feed.group, feed.changes.consumer, tables, feed.pipeline.sync.max_batch_changes, state.until_head
        )
        df = (
            spark.readStream.format(fmt)
            .option("spec", spec.to_json())
            .option("initial", orjson.dumps(initial).decode())
            .load()
        )
        trigger = f"{feed.pipeline.sync.trigger_s} seconds"
        query = (
            df.writeStream.foreachBatch(lambda batch, batch_id: self.sink(spark, wire, batch, batch_id))
            .trigger(processingTime=trigger)
            .option("checkpointLocation", checkpoint)
            .queryName(f"sparkindex-sync-{self.run_id}-{attempt}")
            .start()
        )
        state.query_started()  # its reader starts answering from here (the health's clocks)
        try:
            return self._watch(query)
        finally:
            state.query_running.clear()
            try:
                query.stop()
            except Exception as exc:  # noqa: BLE001 - stopping a query that already failed
                log.debug("stopping the query: %s", exc)

    def _watch(self, query: Any) -> str | None:
        """Wait until stopped, caught up, or the query failed (each poll blocks on the query)."""
        state = self.state
        next_events = next_progress = 0.0
        while not state.stop_requested.is_set():
            if query.awaitTermination(0.2) or state.sink_failure is not None:
                break
            progress = time.monotonic() >= next_progress
            if self._look_at_query(query, progress=progress) and progress:
                next_progress = time.monotonic() + PROGRESS_CHECK_S
            self.idle()
            if state.error is not None:
                break
            if time.monotonic() >= next_events:
                next_events = time.monotonic() + EVENTS_CHECK_S
                self.watcher.show()
                if state.error is not None:
                    break
            try:
                if self._done(query):
                    state.caught_up = True
                    break
            except LogGap as gap:
                return brief(gap)  # the query is stopped; the gap is healed before the next one
        # let a batch that is being applied finish, so its acknowledgement is kept
        deadline = time.monotonic() + 60
        while state.batch_running.is_set() and time.monotonic() < deadline:
            query.awaitTermination(0.1)
        if state.sink_failure is not None:
            return state.sink_failure
        exc = query.exception() if state.error is None else None
        return None if exc is None else brief(exc)[:1000]

    def _look_at_query(self, query: Any, *, progress: bool) -> bool:
        """Tell the run's state whether the reader answers (what its health looks at, :mod:`.health`):
        a progress report Spark had not reported before, or a trigger not active once the first
        has ended. The report is read when *progress*, and only while a trigger is active or none
        has been seen yet. True when it was read."""
        try:
            active = bool(query.status.get("isTriggerActive"))
            read = progress and (active or self.state.progress_seen is None)
            last = query.lastProgress if read else None
        except Exception as exc:  # noqa: BLE001 - a query that just ended: the loop finds out itself
            log.debug("reading the query's status: %s", exc)
            return False
        seen = None if last is None else (last.get("batchId"), last.get("timestamp"))
        self.state.saw_query(active, seen)
        return read

    # -- when a bounded run is done ----------------------------------------------------------------
    def _nothing_to_stream(self) -> bool:
        """A bounded run with nothing to apply starts no query (one stopped at once leaves Spark's runner
        process failing to connect back); a stop under way or a daily deferred refresh take the query's."""
        if self.state.stop_requested.is_set() or self.runs_deferred:
            return False
        try:
            self.state.caught_up = self._nothing_left()
        except Exception as exc:  # noqa: BLE001 - a query finds it again, and heals or reports it
            log.debug("looking for changes before streaming: %s", brief(exc))
        return self.state.caught_up

    def _done(self, query: Any) -> bool:
        busy = self.state.batch_running.is_set() or query.status.get("isTriggerActive")  # a batch under way
        return not busy and self._nothing_left()

    def _nothing_left(self) -> bool:
        """A bounded run's source has nothing after the acknowledged offset up to the head recorded
        at start: asked of the source, not of Spark (an outage also looks like "no new data")."""
        if not self.until_caught_up:
            return False
        state, changes = self.state, self.feed.changes
        if changes.first_batch_needed and state.totals.batches == 0 and not state.totals.reconciled:
            return False  # the first batch's key diff finds deletes no probe can see
        acked = state.acked or self.feed.start_offset()
        head = state.until_head
        if changes.exact_positions and head is not None and changes.position(acked) >= changes.position(head):
            return True  # the source's positions are exact there (a GTID), no need to read
        try:
            return not changes.pending(acked, head)
        except TransientError:
            return False

    def finish_caught_up(self) -> None:
        """A bounded run found nothing more up to the head it recorded: where the source resumes
        from a head exactly (a PostgreSQL LSN), the aliases are stored at that head, so that the
        offset handed on (to a live group, after a reindex) is never below a slot made meanwhile."""
        feed, state, until = self.feed, self.state, self.state.until_head
        if not state.caught_up or state.error is not None or until is None or not feed.changes.head_is_resumable:
            return
        head = feed.changes.position(until)
        saved = feed.positions.offsets(feed.group)
        behind = {a: (head, until, saved[a].index) for a in feed.aliases if a in saved and saved[a].position < head}
        if not behind:
            return
        feed.positions.save(feed.group, behind)
        state.acked = dict(until)
        state.totals.position = head
        if state.on_ack is not None:
            state.on_ack(head)
        try:
            feed.changes.acknowledge(feed.lowest().offset)
        except (TransientError, LogGap) as exc:
            log.warning("could not release the change log up to %s yet: %s", head, exc)

    def summary(self) -> SyncSummary:
        """The totals, with the position reached and the lag behind the log's head."""
        totals, changes = self.state.totals, self.feed.changes
        offset = self.state.acked or self.feed.start_offset()
        totals.position = changes.position(offset)
        try:
            lag = changes.lag(offset)
            totals.lag_s, totals.lag_bytes = round(lag.seconds, 3), lag.bytes
        except (TransientError, LogGap):
            totals.lag_s = -1.0
        return totals
