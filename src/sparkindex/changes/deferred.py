"""Deferred relations: changes recorded now, applied later (placeholder until built)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.errors import UsageError


def apply_deferred(pipeline: Pipeline, aliases: Sequence[str] | None, group: str | None = None) -> dict[str, Any]:
    raise UsageError("sync --apply-deferred is not available yet")
