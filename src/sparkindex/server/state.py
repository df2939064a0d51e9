"""What every handler of one server shares: the pipeline, the store (read views and writes), the
token guard, the running commands and the progress samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.views import StoreViews
from sparkindex.server.actions import ActionRunner, env_for_children
from sparkindex.server.auth import Guard
from sparkindex.server.progress import RateTracker


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

    @classmethod
    def open(cls, pipeline: Pipeline, config_path: Path, guard: Guard, tick_s: float = 2.0) -> ServerState:
        url, prefix = pipeline.coordination_url(), pipeline.coordination.prefix
        store = CoordinationStore(url, prefix)  # creates or upgrades the schema before any read
        log_dir = pipeline.base_dir / ".sparkindex" / "server"
        return cls(
            pipeline=pipeline,
            config_path=config_path.resolve(),
            guard=guard,
            store=store,
            views=StoreViews(url, prefix),
            actions=ActionRunner(log_dir, env_for_children()),
            tick_s=tick_s,
        )

    def close(self) -> None:
        self.views.close()
        self.store.close()

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
