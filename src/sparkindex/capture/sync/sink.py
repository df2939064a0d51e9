"""The sync's sink: each micro-batch applied on Spark, then acknowledged.

A batch is acknowledged only after every alias applied it, and a batch that fails is never
acknowledged: the stream starts again from the acknowledged position and applies it again (the
position is the documents' external version, so applying twice keeps their order). Nothing here
raises back through Py4J, which would print the worker's traceback: failures end the query.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from sparkindex.capture.restarts import BOUNDED_WINDOW_S, WINDOW_S
from sparkindex.capture.sync.feed import Feed
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync_errors import brief
from sparkindex.coordination.offsets import GroupOffset
from sparkindex.errors import LogGap, SparkIndexError, TransientError
from sparkindex.retry import Backoff

log = logging.getLogger(__name__)

#: how often a running sync measures how much log the source retains for it
LAG_CHECK_S = 10.0


class BatchSink:
    """Spark's foreachBatch callback of a stream run: apply a micro-batch on Spark, then acknowledge it."""

    def __init__(
        self,
        feed: Feed,
        state: RunState,
        *,
        run_id: str,
        bounded: bool,
        index_of: Callable[[str], str],
        wait_for_holds: Callable[[], dict[str, GroupOffset]],
        count: Callable[[str, str], None],
    ) -> None:
        self.feed = feed
        self.state = state
        self.run_id = run_id
        #: a bounded run (until caught up, or a catch-up) gives a failing batch a shorter window
        self.window_s = BOUNDED_WINDOW_S if bounded else WINDOW_S
        #: the index each alias's changes go to
        self.index_of = index_of
        #: the offsets to apply from, once no reindex holds our aliases
        self.wait_for_holds = wait_for_holds
        self.count = count
        self._next_lag_check = 0.0

    def __call__(self, spark: Any, wire: str, batch: Any, batch_id: int) -> None:
        state = self.state
        if state.stop_requested.is_set() or state.error is not None or state.sink_failure is not None:
            return  # a batch after an abandoned one is never applied, so never acknowledged past it
        state.batch_running.set()
        try:
            self._apply_batch(spark, wire, batch, batch_id)
        except Exception as exc:  # noqa: BLE001 - raising here would go back through Py4J (a traceback)
            # the store out of reach while holds were read or the batch acknowledged: the batch is
            # abandoned unacknowledged, the query ends, and the next starts from the acknowledged
            # position (a batch applied but not acknowledged is applied again, versions keep order)
            state.sink_failure = f"batch {batch_id} abandoned: {brief(exc)}"
            log.warning("%s; the stream starts again from the acknowledged position", state.sink_failure)
        finally:
            state.batch_running.clear()

    def _apply_batch(self, spark: Any, wire: str, batch: Any, batch_id: int) -> None:
        # imported when a batch comes: pyspark is loaded only by a run that streams
        from sparkindex.capture.stream import SUMMARY_DDL, ApplyTasks
        from sparkindex.spark.task_errors import raise_returned

        feed, state = self.feed, self.state
        backoff = Backoff(feed.pipeline.job.backoff_initial_s, feed.pipeline.job.backoff_max_s)
        started = time.monotonic()
        # as long as a query may fail without progress before it is started again: a batch that
        # keeps failing (the store gone, say) ends the query, and the restarts give up in the end
        window_s = self.window_s
        while True:
            saved = self.wait_for_holds()
            plan = {a: (self.index_of(a), saved[a].position) for a in feed.aliases}
            run = {"job_id": f"sync:{feed.group}", "group": feed.group}
            try:
                tasks = ApplyTasks(wire, run, plan, feed.plans, self.run_id)
                rows = batch.mapInArrow(tasks, SUMMARY_DDL).collect()
                raise_returned(rows)  # an error a task classified comes back as its own class
                break
            except Exception as exc:  # noqa: BLE001 - Spark's errors reach us as any class
                # Raising here would go back through Py4J, which prints a traceback; the batch
                # is abandoned instead: not acknowledged, so the next run applies it again.
                if state.stop_requested.is_set():
                    log.info("batch %d abandoned while stopping (not acknowledged): %s", batch_id, brief(exc))
                    return
                if isinstance(exc, SparkIndexError) and not isinstance(exc, TransientError):
                    state.fail(exc)  # it would fail the same way again: the run stops with it
                    return
                if time.monotonic() - started >= window_s:
                    state.sink_failure = f"batch {batch_id} abandoned after failing for {window_s:.0f} s: {brief(exc)}"
                    return
                delay = backoff.next_delay()
                self.count("apply", brief(exc))
                log.warning("applying batch %d failed (retrying in %.1f s): %s", batch_id, delay, brief(exc))
                state.stop_requested.wait(delay)
        self._acknowledge(rows, plan)

    def _acknowledge(self, rows: list[Any], plan: Mapping[str, tuple[str, int]]) -> None:
        feed, state, totals = self.feed, self.state, self.state.totals
        end = next((r for r in rows if r["alias"] is None), None)
        if end is None:
            return
        offset = orjson.loads(end["end_offset"])
        position = int(end["end_position"])
        counts: dict[str, tuple[int, int]] = {}
        for r in rows:
            if r["alias"] is not None:
                applied, deleted = counts.get(r["alias"], (0, 0))
                counts[r["alias"]] = (applied + r["applied"], deleted + r["deleted"])
                totals.applied += r["applied"]
                totals.deleted += r["deleted"]
                totals.failed += r["failed"]
        if end["ts"]:
            state.last_ts = float(end["ts"])
        lag = max(0.0, time.time() - state.last_ts) if state.last_ts else 0.0
        positions = {a: (max(position, after), offset, index) for a, (index, after) in plan.items()}
        feed.positions.save(feed.group, positions, counts, lag, totals.lag_bytes)
        totals.batches += 1
        totals.position = position
        state.acked = offset
        state.advanced()
        if state.on_ack is not None:
            state.on_ack(position)
        # the log may let go of what every alias of the pipeline in the group has applied
        lowest = feed.lowest()
        try:
            feed.changes.acknowledge(lowest.offset)
        except (TransientError, LogGap) as exc:  # a gap: the next read finds it and the sync heals it
            log.warning("could not release the change log up to %s yet: %s", lowest.offset, exc)
        if time.monotonic() >= self._next_lag_check:
            self._next_lag_check = time.monotonic() + LAG_CHECK_S
            self._check_lag(lowest.offset)

    def _check_lag(self, offset: Mapping[str, Any]) -> None:
        """Warn when the source retains more log for us than the configured limit: a slot left
        behind is the classic way change capture fills a disk."""
        try:
            lag = self.feed.changes.lag(offset)
        except (TransientError, LogGap):
            return
        self.state.totals.lag_bytes = lag.bytes
        limit = self.feed.pipeline.sync.lag_warn_bytes
        if lag.bytes is not None and lag.bytes > limit:
            log.warning(
                "consumer %r: the source retains %.1f MB of log for it (sync.lag_warn_bytes: %.1f MB); "
                "a sync that stays behind, or a group nobody syncs (sparkindex sync --drop-slot), keeps it",
                self.feed.changes.consumer,
                lag.bytes / 1e6,
                limit / 1e6,
            )
