"""Settings of the embedded Tantivy target, from ``tantivy:///root`` plus ``target.options``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkindex.errors import ConfigError


class TantivyTargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: Path
    #: Writer heap while bulk loading; a larger heap means fewer, larger segments.
    writer_heap_mb: int = Field(default=256, ge=16)
    writer_threads: int = Field(default=2, ge=1)
    #: Build new versions in stages, one per partition attempt, adopted at the finish (fast: no
    #: socket hop, no deletes, no shared writer). False sends every write through the version's
    #: writer service, which acknowledges cursors inside a partition: worth it only when single
    #: partitions are so large that redoing one after a crash costs more than the staging saves.
    staged_builds: bool = True
    #: Writer heap of each partition attempt's stage while a new version is built (one
    #: indexing thread each; Spark runs the attempts side by side).
    stage_heap_mb: int = Field(default=128, ge=16)
    #: How long a client waits for the index's writer service to start.
    lock_timeout_s: float = Field(default=120.0, gt=0)
    #: The writer service commits and exits after this long without requests.
    service_idle_s: float = Field(default=30.0, gt=0)

    @classmethod
    def from_url(cls, url: str, base_dir: Path, options: dict[str, Any]) -> TantivyTargetConfig:
        rest = url.split(":", 1)[1]
        rest = rest[2:] if rest.startswith("//") else rest
        if not rest:
            raise ConfigError(f"target.url: {url!r} names no directory (use tantivy:///abs/path or tantivy://rel)")
        root = Path(rest)
        if not root.is_absolute():
            root = (base_dir / root).resolve()
        try:
            return cls(root=root, **options)
        except ValidationError as exc:
            msgs = "; ".join(f"target.options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigError(msgs) from None
