"""The sync's sink: each micro-batch applied on Spark, then acknowledged.

A batch is acknowledged only after every alias applied it, and a batch that fails is never
acknowledged: the stream starts again from the acknowledged position and applies it again (the
position is the documents' external version, so applying twice keeps their order). Nothing here
raises back through Py4J, which would print the worker's traceback: failures end the query.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from sparkindex.capture.restarts import BOUNDED_WINDOW_S, WINDOW_S
from sparkindex.capture.sync_errors import brief
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import ConsumerOffsets, GroupOffset
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import LogGap, SparkIndexError, TransientError
from sparkindex.retry import Backoff
from sparkindex.sources.change_source import ChangeSource

log = logging.getLogger(__name__)

#: how often a running sync measures how much log the source retains for it
LAG_CHECK_S = 10.0


class BatchSink:
    """The part of a sync run (:class:`sparkindex.capture.sync.run.SyncRun`) that applies and
    acknowledges batches; the run provides these attributes."""

    pipeline: Pipeline
    group: str
    consumer: str
    aliases: list[str]
    until_caught_up: bool
    until: Any
    plans: dict[str, IndexPlan]
    run_id: str
    changes: ChangeSource
    positions: ConsumerOffsets
    totals: Any
    stop_requested: threading.Event
    error: BaseException | None
    on_ack: Any
    _batch_running: threading.Event
    _sink_failure: str | None
    _acked: dict[str, Any] | None
    _last_ts: float
    _last_progress: float
    _next_lag_check: float

    if TYPE_CHECKING:  # the run's own methods; not defined here, so they never shadow it

        def _index(self, alias: str) -> str: ...
        def _count(self, kind: str, message: str) -> None: ...
        def _wait_for_holds(self) -> dict[str, GroupOffset]: ...
        def _lowest(self) -> GroupOffset: ...

    def _sink(self, spark: Any, wire: str, batch: Any, batch_id: int) -> None:
        if self.stop_requested.is_set() or self.error is not None or self._sink_failure is not None:
            return  # a batch after an abandoned one is never applied, so never acknowledged past it
        self._batch_running.set()
        try:
            self._apply_batch(spark, wire, batch, batch_id)
        except Exception as exc:  # noqa: BLE001 - raising here would go back through Py4J (a traceback)
            # the store out of reach while holds were read or the batch acknowledged: the batch is
            # abandoned unacknowledged, the query ends, and the next starts from the acknowledged
            # position (a batch applied but not acknowledged is applied again, versions keep order)
            self._sink_failure = f"batch {batch_id} abandoned: {brief(exc)}"
            log.warning("%s; the stream starts again from the acknowledged position", self._sink_failure)
        finally:
            self._batch_running.clear()

    def _apply_batch(self, spark: Any, wire: str, batch: Any, batch_id: int) -> None:
        # imported when a batch comes: pyspark is loaded only by a run that streams
        from sparkindex.capture.stream import SUMMARY_DDL, ApplyTasks
        from sparkindex.spark.task_errors import raise_returned

        backoff = Backoff(self.pipeline.job.backoff_initial_s, self.pipeline.job.backoff_max_s)
        started = time.monotonic()
        # as long as a query may fail without progress before it is started again: a batch that
        # keeps failing (the store gone, say) ends the query, and the restarts give up in the end
        window_s = BOUNDED_WINDOW_S if (self.until_caught_up or self.until is not None) else WINDOW_S
        while True:
            saved = self._wait_for_holds()
            plan = {a: (self._index(a), saved[a].position) for a in self.aliases}
            run = {"job_id": f"sync:{self.group}", "group": self.group}
            try:
                tasks = ApplyTasks(wire, run, plan, self.plans, self.run_id)
                rows = batch.mapInArrow(tasks, SUMMARY_DDL).collect()
                raise_returned(rows)  # an error a task classified comes back as its own class
                break
            except Exception as exc:  # noqa: BLE001 - Spark's errors reach us as any class
                # Raising here would go back through Py4J, which prints a traceback; the batch
                # is abandoned instead: not acknowledged, so the next run applies it again.
                if self.stop_requested.is_set():
                    log.info("batch %d abandoned while stopping (not acknowledged): %s", batch_id, brief(exc))
                    return
                if isinstance(exc, SparkIndexError) and not isinstance(exc, TransientError):
                    self.error = exc  # it would fail the same way again: the run stops with it
                    self.stop_requested.set()
                    return
                if time.monotonic() - started >= window_s:
                    self._sink_failure = f"batch {batch_id} abandoned after failing for {window_s:.0f} s: {brief(exc)}"
                    return
                delay = backoff.next_delay()
                self._count("apply", brief(exc))
                log.warning("applying batch %d failed (retrying in %.1f s): %s", batch_id, delay, brief(exc))
                self.stop_requested.wait(delay)
        self._acknowledge(rows, plan)

    def _acknowledge(self, rows: list[Any], plan: Mapping[str, tuple[str, int]]) -> None:
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
                self.totals.applied += r["applied"]
                self.totals.deleted += r["deleted"]
                self.totals.failed += r["failed"]
        if end["ts"]:
            self._last_ts = float(end["ts"])
        lag = max(0.0, time.time() - self._last_ts) if self._last_ts else 0.0
        positions = {a: (max(position, after), offset, index) for a, (index, after) in plan.items()}
        self.positions.save(self.group, positions, counts, lag, self.totals.lag_bytes)
        self.totals.batches += 1
        self.totals.position = position
        self._acked = offset
        self._last_progress = time.monotonic()
        if self.on_ack is not None:
            self.on_ack(position)
        # the log may let go of what every alias of the pipeline in the group has applied
        lowest = self._lowest()
        try:
            self.changes.acknowledge(lowest.offset)
        except (TransientError, LogGap) as exc:  # a gap: the next read finds it and the sync heals it
            log.warning("could not release the change log up to %s yet: %s", lowest.offset, exc)
        if time.monotonic() >= self._next_lag_check:
            self._next_lag_check = time.monotonic() + LAG_CHECK_S
            self._check_lag(lowest.offset)

    def _check_lag(self, offset: Mapping[str, Any]) -> None:
        """Warn when the source retains more log for us than the configured limit: a slot left
        behind is the classic way change capture fills a disk."""
        try:
            lag = self.changes.lag(offset)
        except (TransientError, LogGap):
            return
        self.totals.lag_bytes = lag.bytes
        limit = self.pipeline.sync.lag_warn_bytes
        if lag.bytes is not None and lag.bytes > limit:
            log.warning(
                "consumer %r: the source retains %.1f MB of log for it (sync.lag_warn_bytes: %.1f MB); "
                "a sync that stays behind, or a group nobody syncs (sparkindex sync --drop-slot), keeps it",
                self.consumer,
                lag.bytes / 1e6,
                limit / 1e6,
            )
