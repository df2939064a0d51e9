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

import datetime as dt
import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from sqlalchemy.exc import DBAPIError

from sparkindex.capture.consumer_offsets import carry_over
from sparkindex.capture.sync.events import EventWatcher
from sparkindex.capture.sync.feed import Feed, open_feed
from sparkindex.capture.sync.gaps import GapHealer
from sparkindex.capture.sync.hand_over import HoldResponder
from sparkindex.capture.sync.health import StreamHealth, SyncHealth
from sparkindex.capture.sync.query import ChangeStream
from sparkindex.capture.sync.sink import BatchSink
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync.summary import SyncSummary
from sparkindex.capture.sync_errors import brief
from sparkindex.capture.sync_lock import LOCK_REFRESH_S, LOCK_TTL_S, STOPS_ON_SIGTERM, source_key, sync_lock_key
from sparkindex.config.model import Pipeline
from sparkindex.coordination.keeper import LockKeeper
from sparkindex.coordination.recovery import holder_is_dead, holder_name
from sparkindex.documents.planning import selected_aliases
from sparkindex.errors import ConfigError, SparkIndexError, TransientError

__all__ = ["LOCK_REFRESH_S", "LOCK_TTL_S", "SyncRun", "SyncSummary", "session_factory", "source_key", "sync_lock_key"]

log = logging.getLogger(__name__)


def session_factory(pipeline: Pipeline, given: Callable[[], Any] | None) -> Callable[[], Any]:
    """The caller's SparkSession factory, or one that builds sparkindex's own session on first use."""
    if given is not None:
        return given

    def build() -> Any:
        from sparkindex.spark.session import build_session

        return build_session(pipeline.spark, pipeline.state_dir / "spark.log")

    return build


class SyncRun:
    """One ``sync`` invocation: a live consumer group's stream, under its lock.

    Composed of the parts a reindex's catch-up shares (:class:`Feed`, :class:`ChangeStream`,
    :class:`BatchSink`, :class:`GapHealer`, :class:`EventWatcher`), plus what only a live sync
    does: the lock and the presence it announces, the holds it answers, and the daily deferred
    refresh.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        aliases: Sequence[str] | None = None,
        *,
        group: str | None = None,
        until_caught_up: bool = False,
        spark_factory: Callable[[], Any] | None = None,
        on_gap: Literal["reconcile", "fail"] | None = None,
        stops_on_sigterm: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.aliases = selected_aliases(pipeline, aliases)
        self.group = group or pipeline.sync.group
        self.until_caught_up = until_caught_up
        self.on_gap = on_gap or pipeline.sync.on_gap
        self.spark = session_factory(pipeline, spark_factory)
        self.run_id = uuid.uuid4().hex[:12]
        #: the CLI's process stops cleanly on SIGTERM, so `sparkindex stop` may send it one
        self.holder = holder_name(self.run_id) + (STOPS_ON_SIGTERM if stops_on_sigterm else "")
        self.state = RunState(SyncSummary(0, 0, 0, 0.0, group=self.group))
        self._health = StreamHealth(self.state, self.group)
        self.feed: Feed | None = None
        self._keeper: LockKeeper | None = None
        self._announced = 0.0
        #: the day a scheduled deferred refresh was last attempted by this process (a failed
        #: one waits for the next day rather than being retried after every batch)
        self._deferred_tried: dt.date | None = None

    # what a caller (the CLI's signal handler, a host that stops it, the benchmark) reaches
    @property
    def stop_requested(self) -> threading.Event:
        return self.state.stop_requested

    @property
    def streaming(self) -> threading.Event:
        return self.state.streaming

    @property
    def totals(self) -> SyncSummary:
        return self.state.totals

    @property
    def error(self) -> BaseException | None:
        return self.state.error

    @property
    def on_ack(self) -> Callable[[int], None] | None:
        return self.state.on_ack

    @on_ack.setter
    def on_ack(self, callback: Callable[[int], None] | None) -> None:
        self.state.on_ack = callback

    def stop(self) -> None:
        """Stop after the batch in flight (it is acknowledged if it completes)."""
        self.state.stop_requested.set()

    def health(self, stall_after_s: float) -> SyncHealth:
        """Whether the run keeps its aliases current (:mod:`.health`); from any thread."""
        return self._health.check(stall_after_s)

    # -- setup -------------------------------------------------------------------------------------
    def prepare(self) -> Feed:
        """Resolve plans and check the source (config errors, exit 2) before any JVM starts. The
        caller owns the feed until :meth:`run` takes it (a run closes it when it ends)."""
        if self.feed is None:
            self.feed = open_feed(self.pipeline, self.aliases, group=self.group, consumer=self.group)
        return self.feed

    def _index(self, alias: str) -> str:
        assert self.feed is not None
        index = self.feed.target.alias_target(alias)
        if index is None:
            raise ConfigError(
                f"{self.pipeline.origin}: alias {alias!r} does not point at an index yet; run `sparkindex reindex` "
                "first (sync keeps an index in step, it does not build one)"
            )
        return index

    def _parts(self, feed: Feed) -> tuple[ChangeStream, GapHealer, HoldResponder]:
        """The run's collaborators, each handed what it needs."""
        state = self.state
        watcher = EventWatcher(feed.events, self.group, state, bounded=self.until_caught_up)
        holds = HoldResponder(feed, state, self.holder)
        gaps = GapHealer(
            feed, state, on_gap=self.on_gap, index_of=feed.target.alias_target, spark=self.spark, count=watcher.count
        )
        sink = BatchSink(
            feed,
            state,
            run_id=self.run_id,
            bounded=self.until_caught_up,
            index_of=self._index,
            wait_for_holds=holds.wait,
            count=watcher.count,
        )
        stream = ChangeStream(
            feed,
            state,
            sink=sink,
            gaps=gaps,
            watcher=watcher,
            spark=self.spark,
            run_id=self.run_id,
            until_caught_up=self.until_caught_up,
            runs_deferred=self.pipeline.sync.deferred_at is not None,
            idle=lambda: self._idle(holds),
        )
        return stream, gaps, holds

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> SyncSummary:
        """The whole sync; a database that stops answering for good ends it as a transient
        failure (exit 3: a rerun resumes from the acknowledged offsets), said in one line."""
        try:
            with self.prepare() as feed:
                self._health.bind(feed)
                try:
                    return self._run(feed)
                finally:
                    self._health.end()  # before the feed closes: no look at the log after this
        except DBAPIError as exc:
            stopped = "a database did not answer, so the sync stopped (rerun to resume)"
            raise TransientError(f"{stopped}: {brief(exc)}") from exc
        finally:
            self._health.end()
            self.feed = None

    def _run(self, feed: Feed) -> SyncSummary:
        state = self.state
        stream, gaps, holds = self._parts(feed)
        watcher = stream.watcher
        key = sync_lock_key(self.group, source_key(self.pipeline))
        token = feed.store.locks.acquire(key, self.holder, LOCK_TTL_S, holder_is_dead=holder_is_dead)
        self._keeper = LockKeeper(feed.store, {key: token}, LOCK_TTL_S, LOCK_REFRESH_S, on_lost=self._on_lock_lost)
        self._keeper.start()
        checkpoint = tempfile.mkdtemp(prefix="sparkindex-sync-")
        try:
            self._announce(feed)
            try:
                initial = self._initial(feed, gaps, holds)
            except Exception as exc:
                if not state.stop_requested.is_set():
                    raise
                log.info("stopped before streaming (the gap stays unreconciled): %s", brief(exc))
                return state.totals
            stream.run(initial, checkpoint)
            stream.finish_caught_up()
        finally:
            try:
                feed.store.sync_holds.retire(self.group, self.holder)
            except Exception as exc:  # noqa: BLE001 - the presence expires on its own; the lock must still go
                log.warning("could not retire the sync's presence (it expires on its own): %s", brief(exc))
            finally:
                self._keeper.stop()
                try:
                    feed.store.locks.release(key, token)
                except DBAPIError as exc:  # the lock expires after its TTL; what ended the run stands
                    log.warning("could not release the sync's lock %s (it expires): %s", key, brief(exc))
                shutil.rmtree(checkpoint, ignore_errors=True)
        if state.error is not None:
            watcher.record_end(state.error)
            raise state.error
        return stream.summary()

    def _initial(self, feed: Feed, gaps: GapHealer, holds: HoldResponder) -> dict[str, Any]:
        """Prove the log can serve every stored offset (heal or refuse a gap), start (and create)
        the source, give new aliases the offset of now; return the offset of the alias furthest
        behind (the stream's start)."""
        changes = feed.changes
        changes.prepare()
        carry_over(self.pipeline, feed.store, feed.positions, self.group, self.aliases)
        holds.wait()  # a reindex swapping an alias now hands it over before we look
        gaps.heal()
        now = changes.start()
        saved = feed.positions.offsets(self.group)
        fresh = {a: (changes.position(now), now, self._index(a)) for a in self.aliases if a not in saved}
        if fresh:
            feed.positions.save(self.group, fresh)
        return feed.start_offset()

    def _idle(self, holds: HoldResponder) -> None:
        """Between two looks at the query: the daily deferred refresh, holds answered at once when
        no batch runs (a batch blocks on them first), the presence renewed."""
        self._maybe_apply_deferred()
        if not self.state.batch_running.is_set():
            holds.pause_held()
        if time.monotonic() - self._announced >= LOCK_REFRESH_S and self.feed is not None:
            self._announce(self.feed)

    def _announce(self, feed: Feed) -> None:
        """Tell reindexes which aliases this sync serves (and so answers holds for): a reindex of
        another alias never waits for it. Renewed as the lock is; gone when the sync stops."""
        try:
            feed.store.sync_holds.announce(self.group, self.aliases, self.holder, LOCK_TTL_S)
            self._announced = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the store is down: the next tick tries again
            log.warning("announcing the aliases served (tried again at the next tick): %s", brief(exc))

    def _on_lock_lost(self, reason: str) -> None:
        if self._keeper is not None and self._keeper.expired:
            # not a request to stop: the store was out of reach for longer than the lock lives, so
            # the sync cannot go on, and must not end as if it had been stopped on purpose (exit 0)
            self.state.error = TransientError(
                f"{reason}; the sync stopped (rerun to resume from the acknowledged offsets)"
            )
        log.warning("%s; sync stops after its current batch", reason)
        self.state.stop_requested.set()

    def _maybe_apply_deferred(self) -> None:
        """``sync.deferred_at``: the daily refresh of deferred relations, beside the stream."""
        from sparkindex.capture.sync.deferred import apply_deferred, due

        today, at = dt.date.today(), self.pipeline.sync.deferred_at
        if self._deferred_tried == today or not due(at, None) or self.feed is None:
            return  # tried today already, or not the time of day yet
        self._deferred_tried = today
        if not due(at, self.feed.store.deferred_runs.last_deferred_run(self.aliases)):
            return  # applied today already: before a restart, or by sync --apply-deferred
        try:
            result = apply_deferred(self.pipeline, self.aliases, self.group, spark=self.spark())
            log.warning("deferred changes applied: %s", result)
        except SparkIndexError as exc:
            log.error("applying deferred changes failed (retried tomorrow, or run sync --apply-deferred): %s", exc)
