"""What every handler of one server shares: the pipeline, the store (read views and writes), the
token guard, the running commands and the progress samples."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkindex.capture.consumer_offsets import open_consumer_offsets
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.coordination.offsets import ConsumerOffsets
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.sync_events import SyncEvent
from sparkindex.coordination.views import StoreViews, SyncConsumer
from sparkindex.errors import SparkIndexError
from sparkindex.resources import open_store, open_target
from sparkindex.server.actions import ActionRunner, env_for_children
from sparkindex.server.auth import Guard
from sparkindex.server.progress import RateTracker
from sparkindex.targets.target import Target

log = logging.getLogger(__name__)


@dataclass
class ServerState:
    pipeline: Pipeline
    config_path: Path
    guard: Guard
    store: CoordinationStore
    views: StoreViews
    actions: ActionRunner
    tracker: RateTracker = field(default_factory=RateTracker)
    tick_s: float = 2.0
    _offsets: ConsumerOffsets | None = None
    _target: Target | None = None

    @classmethod
    def open(cls, pipeline: Pipeline, config_path: Path, guard: Guard, tick_s: float = 2.0) -> ServerState:
        """The state of one server; it holds the store (and later the target) for the server's
        whole life, so :meth:`close` (the app's lifespan calls it at shutdown) is what closes them."""
        store = open_store(pipeline)  # creates or upgrades the schema before any read
        try:
            views = StoreViews(pipeline.coordination_url(), pipeline.coordination.prefix)
        except BaseException:
            store.close()
            raise
        log_dir = pipeline.state_dir / "server"
        return cls(
            pipeline=pipeline,
            config_path=config_path.resolve(),
            guard=guard,
            store=store,
            views=views,
            actions=ActionRunner(log_dir, env_for_children(pipeline.state_dir)),
            tick_s=tick_s,
        )

    def close(self) -> None:
        """Close the views, the store and the target (when the offsets in it were read); each is
        closed even when closing another failed."""
        with contextlib.ExitStack() as closing:
            if self._target is not None:
                closing.callback(self._target.close)
            closing.callback(self.store.close)
            closing.callback(self.views.close)

    def sync_consumers(self) -> list[SyncConsumer]:
        """Consumer groups with their positions, wherever ``sync.offsets`` keeps them (the store's
        table, read defensively by the views; or the target's offsets index)."""
        if self.pipeline.sync.offsets == "store":
            return self.views.sync_consumers()
        try:
            if self._offsets is None:
                self._offsets = open_consumer_offsets(self.pipeline, self.store, self._open_target)
            groups = self._offsets.every_group()
        except SparkIndexError as exc:
            log.warning("consumer offsets in the target could not be read: %s", exc)
            return []
        return sorted(
            (
                SyncConsumer(
                    group=o.group,
                    alias=o.alias,
                    position=str(o.position),
                    updated_at=o.updated_at,
                    lag_s=o.lag_s,
                    index=o.index,
                    applied=float(o.applied),
                    deleted=float(o.deleted),
                )
                for o in groups
            ),
            key=lambda c: (c.group, c.alias or ""),
        )

    def sync_events(self) -> list[SyncEvent]:
        """Errors and healed gaps the syncs counted (:mod:`sparkindex.coordination.sync_events`)."""
        try:
            return self.store.sync_events.events()
        except Exception as exc:  # noqa: BLE001 - a scrape shows what it can read
            log.warning("sync events could not be read: %s", exc)
            return []

    def _open_target(self) -> Target:
        if self._target is None:
            self._target = open_target(self.pipeline)
        return self._target

    @property
    def aliases(self) -> list[str]:
        return [ix.alias for ix in self.pipeline.indexes]

    def describe(self) -> dict[str, Any]:
        """The pipeline as the page may show it: every URL with its password hidden."""
        p = self.pipeline
        return {
            "config": str(self.config_path),
            "aliases": self.aliases,
            "source": redact_url(p.source.url),
            "target": redact_url(p.target.url),
            "coordination": redact_url(p.coordination_url()),
            "prefix": p.coordination.prefix,
            "spark_master": p.spark.master,
            "verify_every_s": p.verify.every,
        }
