"""``sparkindex sync``: one Structured Streaming query per run, applying every change to the
aliases of one consumer group, acknowledging positions only after the target did.

The driver owns the acknowledgements. After a batch's apply tasks succeeded, it saves each
alias's position in the coordination store (the consumer group's offsets, authoritative on
restart) and only then lets the change source release the log (a PostgreSQL slot advances to
the lowest position any alias of the group still needs). Spark's own checkpoint is a temporary
folder per run: the store, not Spark, decides where a restarted sync begins, so a crash at any
point replays at most the batches that were not acknowledged.

One sync runs per consumer group and source database at a time (a lock, :mod:`sparkindex.capture.sync_lock`, kept
alive while it runs; it also announces the aliases it serves, so a reindex knows whom to wait for);
``sparkindex stop`` takes the lock over, and the sync stops at the end of its current batch.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import orjson
from sqlalchemy.exc import DBAPIError

from sparkindex.capture.consumer_offsets import carry_over, open_consumer_offsets
from sparkindex.capture.fanout import FanOut
from sparkindex.capture.restarts import BOUNDED_WINDOW_S, WINDOW_S, StreamRestarts
from sparkindex.capture.session import resolve_consumer_plan, watched_tables
from sparkindex.capture.source import open_change_source
from sparkindex.capture.sync.events import EventWatching
from sparkindex.capture.sync.gaps import GapHealing
from sparkindex.capture.sync.hand_over import HoldAnswering
from sparkindex.capture.sync.sink import BatchSink
from sparkindex.capture.sync.summary import SyncSummary
from sparkindex.capture.sync_errors import brief
from sparkindex.capture.sync_lock import LOCK_REFRESH_S, LOCK_TTL_S, source_key, sync_lock_key
from sparkindex.config.model import Pipeline
from sparkindex.coordination.keeper import LockKeeper
from sparkindex.coordination.recovery import holder_is_dead, holder_name
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.sync_events import SyncEvents
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.planning import selected_aliases
from sparkindex.errors import ConfigError, LogGap, PermanentError, SparkIndexError, TransientError
from sparkindex.sources.change_source import ChangeSource
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target

__all__ = ["LOCK_REFRESH_S", "LOCK_TTL_S", "SyncRun", "SyncSummary", "source_key", "sync_lock_key"]

log = logging.getLogger(__name__)

#: how often the driver looks for errors the log reader and the apply tasks counted
EVENTS_CHECK_S = 1.0


class SyncRun(GapHealing, HoldAnswering, BatchSink, EventWatching):
    """One ``sync`` invocation (or a reindex's catch-up, with *indexes* naming the new versions)."""

    def __init__(
        self,
        pipeline: Pipeline,
        aliases: Sequence[str] | None = None,
        *,
        group: str | None = None,
        until_caught_up: bool = False,
        spark_factory: Callable[[], Any] | None = None,
        indexes: Mapping[str, str] | None = None,
        consumer: str | None = None,
        lock: bool = True,
        until: Callable[[int], bool] | None = None,
        holder: str | None = None,
        on_gap: Literal["reconcile", "fail"] | None = None,
        plans: Mapping[str, IndexPlan] | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: a reindex's catch-up passes the job's plans; a sync resolves its own once, in prepare
        self._given_plans = dict(plans) if plans is not None else None
        self.on_gap = on_gap or pipeline.sync.on_gap
        self.aliases = selected_aliases(pipeline, aliases)
        self.group = group or pipeline.sync.group
        self.consumer = consumer or self.group
        self.until_caught_up = until_caught_up
        self.spark_factory = spark_factory
        self.fixed_indexes = dict(indexes or {})
        self.lock = lock
        self.until = until  # extra stop condition on the acknowledged position (catch-up)
        self.hold_owner = holder  # a reindex's catch-up applies through the holds it placed itself
        self.run_id = uuid.uuid4().hex[:12]
        self.holder = holder_name(self.run_id)
        self.stop_requested = threading.Event()
        self.totals = SyncSummary(0, 0, 0, 0.0, group=self.group)
        self._last_ts = 0.0
        self._batch_running = threading.Event()
        self._acked: dict[str, Any] | None = None
        self._next_lag_check = 0.0
        #: the day a scheduled deferred refresh was last attempted by this process (a failed
        #: one waits for the next day rather than being retried after every batch)
        self._deferred_tried: dt.date | None = None
        #: set once the streaming query runs; ``on_ack(position)`` after every acknowledged batch
        self.streaming = threading.Event()
        self.on_ack: Callable[[int], None] | None = None
        self.error: BaseException | None = None
        #: why the sink gave the current query up (the store out of reach): the query is ended
        #: and started again from the acknowledged position, never raised back through Py4J
        self._sink_failure: str | None = None
        #: a bounded run that found nothing more up to the head it recorded at start
        self._caught_up = False
        #: the error events already shown on the terminal: (kind, count) per kind
        self._events_seen: dict[str, int] = {}
        self._last_progress = time.monotonic()
        self._announced = 0.0
        self._keeper: LockKeeper | None = None
        self._was_held = False  # one of our aliases was held by a reindex at the last look

    # -- setup -------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Resolve plans and check the source (config errors, exit 2) before any JVM starts."""
        p = self.pipeline
        self.source = open_source(p.source_url(), p.job.source_timeout_s)
        self.target = open_target(p.target.url, p.base_dir, p.target.options)
        # resolved once, here, and shipped to the apply tasks with every batch
        given = self._given_plans
        self.plans = {a: given[a] if given else resolve_consumer_plan(p, self.source, a) for a in self.aliases}
        self.fanouts = [FanOut(self.plans[a], self.source) for a in self.aliases]
        self.tables = watched_tables(self.fanouts)
        self.changes: ChangeSource = open_change_source(p, self.source, self.tables, self.consumer)
        self.changes.check()
        self.store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
        self.events = SyncEvents(self.store.engine, p.coordination.prefix)
        #: the group's acknowledged positions: the store's, or the target's offsets index
        self.positions = open_consumer_offsets(p, self.store, lambda: self.target)

    def _initial(self) -> dict[str, Any]:
        """Prove the log can serve every stored offset (guarantee 9: heal or refuse a gap), start
        (and create) the source, give new aliases the offset of now; return the offset of the
        alias furthest behind (the stream's start)."""
        self.changes.prepare()
        carry_over(self.pipeline, self.store, self.positions, self.group, self.aliases)
        self._wait_for_holds()  # a reindex swapping an alias now hands it over before we look
        self._heal_gaps()
        now = self.changes.start()
        saved = self.positions.offsets(self.group)
        fresh = {a: (self.changes.position(now), now, self._index(a)) for a in self.aliases if a not in saved}
        if fresh:
            self.positions.save(self.group, fresh)
            saved = self.positions.offsets(self.group)
        mine = [saved[a] for a in self.aliases]
        return min(mine, key=lambda o: o.position).offset

    def _index(self, alias: str) -> str:
        fixed = self.fixed_indexes.get(alias)
        if fixed is not None:
            return fixed
        index = self.target.alias_target(alias)
        if index is None:
            raise ConfigError(
                f"{self.pipeline.origin}: alias {alias!r} does not point at an index yet; run `sparkindex reindex` "
                "first (sync keeps an index in step, it does not build one)"
            )
        return index

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> SyncSummary:
        """The whole sync; a database that stops answering for good ends it as a transient
        failure (exit 3: a rerun resumes from the acknowledged offsets), said in one line."""
        try:
            return self._run()
        except DBAPIError as exc:
            stopped = "a database did not answer, so the sync stopped (rerun to resume)"
            raise TransientError(f"{stopped}: {brief(exc)}") from exc

    def _run(self) -> SyncSummary:
        self.prepare()
        tokens: dict[str, int] = {}
        keeper = None
        if self.lock:
            key = sync_lock_key(self.group, source_key(self.pipeline))
            tokens[key] = self.store.locks.acquire(key, self.holder, LOCK_TTL_S, holder_is_dead=holder_is_dead)
            keeper = LockKeeper(self.store, tokens, LOCK_TTL_S, LOCK_REFRESH_S, on_lost=self._on_lock_lost)
            self._keeper = keeper
            keeper.start()
        checkpoint = tempfile.mkdtemp(prefix="sparkindex-sync-")
        try:
            self._announce()
            try:
                initial = self._initial()
            except Exception as exc:
                if not self.stop_requested.is_set():
                    raise
                log.info("stopped before streaming (the gap stays unreconciled): %s", brief(exc))
                return self.totals
            until = self.changes.head() if self.until_caught_up else None
            self._until = until
            self._stream(initial, until, checkpoint)
            if self._caught_up and self.error is None:
                self._finish_caught_up()
        finally:
            if self.lock:
                with contextlib.suppress(Exception):  # the presence row expires on its own
                    self.store.sync_holds.retire(self.group, self.holder)
            if keeper is not None:
                keeper.stop()
            for key, token in tokens.items():
                try:
                    self.store.locks.release(key, token)
                except DBAPIError as exc:  # the lock expires after its TTL; what ended the run stands
                    log.warning("could not release the sync's lock %s (it expires): %s", key, brief(exc))
            shutil.rmtree(checkpoint, ignore_errors=True)
            self.changes.close()
        if self.error is not None:
            with contextlib.suppress(Exception):  # the store may be what failed
                self.events.record(self.group, "permanent", brief(self.error))
            raise self.error
        return self._summary()

    def _count(self, kind: str, message: str) -> None:
        """Count an error where the server's metrics see it; a store that is down must not turn
        a retried failure into the end of the sync."""
        try:
            self.events.record(self.group, kind, message)
        except Exception as exc:  # noqa: BLE001 - counting is best effort
            log.debug("could not count a %s error: %s", kind, exc)

    def _announce(self) -> None:
        """Tell reindexes which aliases this sync serves (and so answers holds for): a reindex of
        another alias never waits for it. Renewed as the lock is; gone when the sync stops."""
        if not self.lock:
            return  # a catch-up is the holder itself
        try:
            self.store.sync_holds.announce(self.group, self.aliases, self.holder, LOCK_TTL_S)
            self._announced = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the store is down: the next tick tries again
            log.debug("announcing the aliases served: %s", exc)

    def _on_lock_lost(self, reason: str) -> None:
        if self._keeper is not None and self._keeper.expired:
            # not a request to stop: the store was out of reach for longer than the lock lives, so
            # the sync cannot go on, and must not end as if it had been stopped on purpose (exit 0)
            self.error = TransientError(f"{reason}; the sync stopped (rerun to resume from the acknowledged offsets)")
        log.warning("%s; sync stops after its current batch", reason)
        self.stop_requested.set()

    def _spark(self) -> Any:
        if self.spark_factory is not None:
            return self.spark_factory()
        from sparkindex.spark.session import build_session

        return build_session(self.pipeline.spark, self.pipeline.base_dir / ".sparkindex" / "spark.log")

    def _stream(self, initial: dict[str, Any], until: dict[str, Any] | None, checkpoint: str) -> None:
        """Run the query; one that fails (a Python worker that could not start, a lost executor)
        is started again from the acknowledged position, with backoff, until it keeps failing
        without progress (:mod:`sparkindex.capture.restarts`)."""
        bounded = self.until_caught_up or self.until is not None
        restarts = StreamRestarts(
            self.pipeline.job.backoff_initial_s,
            self.pipeline.job.backoff_max_s,
            window_s=BOUNDED_WINDOW_S if bounded else WINDOW_S,
        )
        attempt = 0
        try:
            if self._nothing_to_stream():
                return
            while True:
                attempt += 1
                batches = self.totals.batches
                try:
                    failure = self._query(initial, until, f"{checkpoint}/{attempt}", attempt)
                except Exception as exc:
                    if self.stop_requested.is_set():
                        # stopped by a signal (the JVM may have had one too) or a lost lock: the
                        # batch in flight was not acknowledged; a rerun applies it
                        log.info("the stream ended while stopping: %s", brief(exc))
                        return
                    if isinstance(exc, SparkIndexError) and not isinstance(exc, TransientError | LogGap):
                        raise
                    failure = brief(exc)
                if failure is None or self.error is not None or self.stop_requested.is_set():
                    return
                self._count("restart", failure)
                try:
                    if self._heal_gaps():  # the failure was the log's (a slot gone, binlogs purged)
                        initial = self._start_offset()
                        continue
                except (TransientError, DBAPIError) as exc:  # the source or the store is down: back off
                    failure = f"{failure}; checking the log: {brief(exc)}"
                pause = restarts.failed(progressed=self.totals.batches > batches)
                if pause is None:
                    self.error = PermanentError(
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
                    initial = dict(self._acked or self._start_offset())
                except (TransientError, DBAPIError) as exc:  # the store is down: start where the last query did
                    log.warning("reading the acknowledged position (the next attempt reads it again): %s", brief(exc))
                self.stop_requested.wait(pause)
        finally:
            self.stop_requested.set()

    def _query(
        self, initial: dict[str, Any], until: dict[str, Any] | None, checkpoint: str, attempt: int
    ) -> str | None:
        """One streaming query until stopped, caught up or failed; returns why it failed, if it did."""
        from sparkindex.capture.stream import StreamSpec, register_change_source

        spark = self._spark()
        self._sink_failure = None
        wire = self.pipeline.wire_string()
        fmt = register_change_source(spark, wire, f"{self.run_id}_{attempt}")
        spec = StreamSpec(
            self.group,
            self.consumer,
            [{"name": t.name, "link_columns": t.link_columns, "where": t.where} for t in self.tables],
            self.pipeline.sync.max_batch_changes,
            until,
        )
        df = (
            spark.readStream.format(fmt)
            .option("spec", spec.to_json())
            .option("initial", orjson.dumps(initial).decode())
            .load()
        )
        trigger = f"{self.pipeline.sync.trigger_s} seconds"
        query = (
            df.writeStream.foreachBatch(lambda batch, batch_id: self._sink(spark, wire, batch, batch_id))
            .trigger(processingTime=trigger)
            .option("checkpointLocation", checkpoint)
            .queryName(f"sparkindex-sync-{self.run_id}-{attempt}")
            .start()
        )
        self.streaming.set()
        try:
            return self._watch(query)
        finally:
            try:
                query.stop()
            except Exception as exc:  # noqa: BLE001 - stopping a query that already failed
                log.debug("stopping the query: %s", exc)

    def _watch(self, query: Any) -> str | None:
        """Wait until stopped, caught up, or the query failed (each poll blocks on the query)."""
        next_events = 0.0
        while not self.stop_requested.is_set():
            if query.awaitTermination(0.2) or self._sink_failure is not None:
                break
            self._maybe_apply_deferred()
            if not self._batch_running.is_set():
                self._pause_held()  # an idle sync answers a hold at once (a batch blocks on it first)
            if self.error is not None:
                break
            if time.monotonic() - self._announced >= LOCK_REFRESH_S:
                self._announce()
            if time.monotonic() >= next_events:
                next_events = time.monotonic() + EVENTS_CHECK_S
                self._show_events()
                if self.error is not None:
                    break
            try:
                if self._done(query):
                    self._caught_up = True
                    break
            except LogGap as gap:
                return brief(gap)  # the query is stopped; the gap is healed before the next one
        # let a batch that is being applied finish, so its acknowledgement is kept
        deadline = time.monotonic() + 60
        while self._batch_running.is_set() and time.monotonic() < deadline:
            query.awaitTermination(0.1)
        if self._sink_failure is not None:
            return self._sink_failure
        exc = query.exception() if self.error is None else None
        return None if exc is None else brief(exc)[:1000]

    def _maybe_apply_deferred(self) -> None:
        """``sync.deferred_at``: the daily refresh of deferred relations, beside the stream (of a
        live sync or ``--until-caught-up``; never in a reindex's catch-up)."""
        from sparkindex.capture.sync.deferred import apply_deferred, due

        today, at = dt.date.today(), self.pipeline.sync.deferred_at
        if self.until is not None or self._deferred_tried == today or not due(at, None):
            return  # a reindex's catch-up, tried today already, or not the time of day yet
        self._deferred_tried = today
        if not due(at, self.store.deferred_runs.last_deferred_run(self.aliases)):
            return  # applied today already: before a restart, or by sync --apply-deferred
        try:
            result = apply_deferred(self.pipeline, self.aliases, self.group, spark=self._spark())
            log.warning("deferred changes applied: %s", result)
        except SparkIndexError as exc:
            log.error("applying deferred changes failed (retried tomorrow, or run sync --apply-deferred): %s", exc)

    def _nothing_to_stream(self) -> bool:
        """A bounded run with nothing to apply starts no query (one stopped at once leaves Spark's runner
        process failing to connect back); a stop under way or a daily deferred refresh take the query's."""
        if self.stop_requested.is_set() or self.pipeline.sync.deferred_at is not None:
            return False
        try:
            self._caught_up = self._nothing_left()
        except Exception as exc:  # noqa: BLE001 - a query finds it again, and heals or reports it
            log.debug("looking for changes before streaming: %s", brief(exc))
        return self._caught_up

    def _done(self, query: Any) -> bool:
        busy = self._batch_running.is_set() or query.status.get("isTriggerActive")  # a batch under way
        return not busy and self._nothing_left()

    def _nothing_left(self) -> bool:
        """A bounded run's source has nothing after the acknowledged offset up to the head recorded
        at start: asked of the source, not of Spark (an outage also looks like "no new data")."""
        if not self.until_caught_up and self.until is None:
            return False
        if self.changes.first_batch_needed and self.totals.batches == 0 and not self.totals.reconciled:
            return False  # the first batch's key diff finds deletes no probe can see
        acked = self._acked or self._start_offset()
        if self.until is not None and not self.until(self.changes.position(acked)):
            return False
        exact = self.changes.exact_positions
        if exact and self._until is not None and self.changes.position(acked) >= self.changes.position(self._until):
            return True  # the source's positions are exact there (a GTID), no need to read
        try:
            return not self.changes.pending(acked, self._until)
        except TransientError:
            return False

    def _start_offset(self) -> dict[str, Any]:
        saved = self.positions.offsets(self.group)
        return min((saved[a] for a in self.aliases), key=lambda o: o.position).offset

    def _summary(self) -> SyncSummary:
        offset = self._acked or self._start_offset()
        self.totals.position = self.changes.position(offset)
        try:
            lag = self.changes.lag(offset)
            self.totals.lag_s, self.totals.lag_bytes = round(lag.seconds, 3), lag.bytes
        except (TransientError, LogGap):
            self.totals.lag_s = -1.0
        return self.totals
