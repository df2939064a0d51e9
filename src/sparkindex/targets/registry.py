"""Choosing the target backend from the URL scheme."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.targets.base import Target


def open_target(url: str, base_dir: Path, options: dict[str, Any] | None = None) -> Target:
    scheme = url.split(":", 1)[0].lower()
    if scheme == "tantivy":
        from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

        return TantivyTarget(TantivyTargetConfig.from_url(url, base_dir, options or {}))
    raise ConfigError(f"target.url: unsupported target {scheme!r} in {redact_url(url)!r} (supported: tantivy)")
