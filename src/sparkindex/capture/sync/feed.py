"""What a stream run reads from and writes to, opened together and closed together.

A live sync and a reindex's catch-up open the same things: the source and its change log, the
target, the store, the consumer group's positions, and the plans the apply tasks are shipped
with. :func:`open_feed` opens them in that order (a config error, exit 2, comes before any JVM
starts) and :meth:`Feed.close` closes what was opened, so a long-lived process that runs many
syncs keeps no connection of a finished one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

from sparkindex.capture.consumer_offsets import open_consumer_offsets
from sparkindex.capture.fanout import FanOut
from sparkindex.capture.session import resolve_consumer_plan, watched_tables
from sparkindex.capture.source import open_change_source
from sparkindex.capture.sync_errors import brief
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import ConsumerOffsets, GroupOffset
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.sync_events import SyncEvents
from sparkindex.documents.plan import IndexPlan
from sparkindex.resources import open_source, open_store, open_target
from sparkindex.sources.base import Source
from sparkindex.sources.change_source import ChangeSource
from sparkindex.targets.target import Target

log = logging.getLogger(__name__)


@dataclass
class Feed:
    pipeline: Pipeline
    group: str
    aliases: list[str]
    source: Source
    target: Target
    plans: dict[str, IndexPlan]
    fanouts: list[FanOut]
    changes: ChangeSource
    store: CoordinationStore
    events: SyncEvents
    #: the group's acknowledged positions: the store's, or the target's offsets index
    positions: ConsumerOffsets

    def start_offset(self) -> dict[str, object]:
        """The stored offset of the alias furthest behind: where a stream of these aliases starts."""
        saved = self.positions.offsets(self.group)
        return min((saved[a] for a in self.aliases), key=lambda o: o.position).offset

    def lowest(self) -> GroupOffset:
        """The offset the log may let go up to: the lowest of every alias of this pipeline in the
        group (a sync of some aliases must not release what the others still need)."""
        saved = self.positions.offsets(self.group)
        mine = {i.alias for i in self.pipeline.indexes}
        return min((o for a, o in saved.items() if a in mine), key=lambda o: o.position)

    def close(self) -> None:
        """Close everything opened, the change log first (it may hold a replication connection)."""
        for name, part in (("change log", self.changes), ("target", self.target), ("source", self.source)):
            try:
                part.close()
            except Exception as exc:  # noqa: BLE001 - closing the rest matters more than this one's reason
                log.warning("closing the sync's %s: %s", name, brief(exc))
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001 - a run that ended well must not fail on closing
            log.warning("closing the sync's coordination store: %s", brief(exc))

    def __enter__(self) -> Feed:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_feed(
    pipeline: Pipeline,
    aliases: Sequence[str],
    *,
    group: str,
    consumer: str,
    plans: Mapping[str, IndexPlan] | None = None,
) -> Feed:
    """Open what a stream run of *aliases* needs and check the change log; *plans* are a reindex's
    (its catch-up applies with the job's own), else resolved here once and shipped with every batch."""
    with contextlib.ExitStack() as opened:
        source = open_source(pipeline)
        opened.callback(source.close)
        target = open_target(pipeline)
        opened.callback(target.close)
        resolved = {a: plans[a] if plans else resolve_consumer_plan(pipeline, source, a) for a in aliases}
        fanouts = [FanOut(resolved[a], source) for a in aliases]
        changes = open_change_source(pipeline, source, watched_tables(fanouts), consumer)
        opened.callback(changes.close)
        changes.check()
        store = open_store(pipeline)
        opened.callback(store.close)
        feed = Feed(
            pipeline,
            group,
            list(aliases),
            source,
            target,
            resolved,
            fanouts,
            changes,
            store,
            store.sync_events,
            open_consumer_offsets(pipeline, store, lambda: target),
        )
        opened.pop_all()
        return feed
