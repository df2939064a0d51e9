"""One round of a reindex's catch-up: every change since the job's position replayed into the new
versions, up to the log's head at the round's start.

It streams like a live sync (:class:`~sparkindex.capture.sync.query.ChangeStream`, the same sink,
the same gap check) but is a runner of its own, because what surrounds the stream differs:

* it writes to fixed index versions that no alias points at yet;
* it applies with the job's own plans, so a version is built and caught up from one plan;
* it takes no lock and announces nothing: the reindex holds the aliases (a live sync answers those
  holds; the round is the holder, so it answers none);
* a gap in its log is refused, never reconciled: a version nobody reads yet cannot be repaired, so
  the job fails and ``reindex --new`` starts afresh;
* it never runs the daily deferred refresh.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError

from sparkindex.capture.consumer_offsets import carry_over
from sparkindex.capture.sync.events import EventWatcher
from sparkindex.capture.sync.feed import Feed, open_feed
from sparkindex.capture.sync.gaps import GapHealer
from sparkindex.capture.sync.query import ChangeStream
from sparkindex.capture.sync.run import session_factory
from sparkindex.capture.sync.sink import BatchSink
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync.summary import SyncSummary
from sparkindex.capture.sync_errors import brief
from sparkindex.config.model import Pipeline
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import TransientError

log = logging.getLogger(__name__)


class CatchUpRound:
    """Replays a catch-up group's changes into *indexes* (alias → new version) up to the head."""

    def __init__(
        self,
        pipeline: Pipeline,
        aliases: Sequence[str],
        *,
        group: str,
        consumer: str,
        indexes: Mapping[str, str],
        plans: Mapping[str, IndexPlan],
        spark_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.aliases = list(aliases)
        self.group = group
        self.consumer = consumer
        self.indexes = dict(indexes)
        self.plans = dict(plans)
        self.spark = session_factory(pipeline, spark_factory)
        self.run_id = uuid.uuid4().hex[:12]
        self.state = RunState(SyncSummary(0, 0, 0, 0.0, group=group))

    def run(self) -> SyncSummary:
        """The round; a database that stops answering fails it as a transient error (the job's
        rerun resumes the catch-up from the positions this group stored)."""
        try:
            feed = open_feed(self.pipeline, self.aliases, group=self.group, consumer=self.consumer, plans=self.plans)
            with feed:
                return self._run(feed)
        except DBAPIError as exc:
            raise TransientError(f"a database did not answer during the catch-up: {brief(exc)}") from exc

    def _run(self, feed: Feed) -> SyncSummary:
        state = self.state
        watcher = EventWatcher(feed.events, self.group, state, bounded=True)
        gaps = GapHealer(
            feed, state, on_gap="fail", index_of=lambda _alias: None, spark=self.spark, count=watcher.count
        )
        sink = BatchSink(
            feed,
            state,
            run_id=self.run_id,
            bounded=True,
            index_of=self.indexes.__getitem__,
            wait_for_holds=lambda: feed.positions.offsets(self.group),
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
            until_caught_up=True,
        )
        checkpoint = tempfile.mkdtemp(prefix="sparkindex-catch-up-")
        try:
            stream.run(self._initial(feed, gaps), checkpoint)
            stream.finish_caught_up()
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
        if state.error is not None:
            watcher.record_end(state.error)
            raise state.error
        return stream.summary()

    def _initial(self, feed: Feed, gaps: GapHealer) -> dict[str, Any]:
        """Refuse a gap, start the log, give an alias the group has no offset for the position of
        now on its new version; return the offset of the alias furthest behind."""
        changes = feed.changes
        changes.prepare()
        carry_over(self.pipeline, feed.store, feed.positions, self.group, self.aliases)
        gaps.heal()  # refuses: on_gap is "fail"
        now = changes.start()
        saved = feed.positions.offsets(self.group)
        fresh = {a: (changes.position(now), now, self.indexes[a]) for a in self.aliases if a not in saved}
        if fresh:
            feed.positions.save(self.group, fresh)
        return feed.start_offset()
