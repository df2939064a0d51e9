"""How jobs run: the ``job`` section (batches, retries, leases, limits) and the ``verify`` schedule."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from sparkindex.config.base import Strict


class JobConfig(Strict):
    """Batches, retries, leases and limits of reindex, verify and re-drive jobs."""

    batch_size: int = Field(default=5000, gt=0, description="documents per bulk request")
    batch_bytes: int = Field(default=16 * 1024 * 1024, gt=0, description="bytes per bulk request")
    retries: int = Field(default=5, ge=0, description="attempts for a transient bulk/source failure")
    partition_retries: int = Field(
        default=3, ge=0, description="attempts of a partition before it fails (MAX_PARTITION_RETRIES)"
    )
    backoff_initial_s: float = Field(
        default=0.5, gt=0, description="the first retry's wait (capped exponential, jitter)"
    )
    backoff_max_s: float = Field(default=30.0, gt=0, description="the longest wait between retries")
    lock_ttl_s: float = Field(default=300.0, gt=0, description="an alias lock lapses this long after its last refresh")
    lock_refresh_s: float = Field(default=60.0, gt=0, description="how often a running job refreshes its alias locks")
    claim_timeout_s: float = Field(
        default=300.0, gt=0, description="a claimed partition whose owner is silent this long is taken back"
    )
    max_partitions_per_entity: int = Field(
        default=10_000, gt=0, description="partitions one index is split into at most"
    )
    max_total_partitions: int = Field(
        default=50_000, gt=0, description="partitions of one job at most (indexes keep their share)"
    )
    keep_versions: int = Field(default=2, ge=1, description="index versions kept per alias, the current one included")
    max_passes: int = Field(default=5, ge=1, description="Spark passes over partitions left PENDING")
    recovery_max_age_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, description="an unfinished job younger than this can be resumed (gc keeps it)"
    )
    reopen_after_s: float = Field(
        default=30.0, gt=0, description="a partition whose target is down stays CLOSED this long"
    )
    source_timeout_s: float = Field(default=600.0, gt=0, description="statement timeout for source queries")
    bulk_in_flight: int = Field(default=2, ge=1, le=16, description="bulks on their way per partition task")
    sync_every_s: float = Field(
        default=10.0, gt=0, description="how often written batches are made durable and their cursors saved"
    )


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_SPAN_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_span(value: Any) -> float:
    """Seconds of a span written ``90s``, ``30m``, ``24h``, ``30d``, ``2w`` or a number of seconds;
    shared by ``verify.every`` and ``gc --older-than`` so both read spans alike."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = _SPAN.match(str(value))
        if m is None:
            raise ValueError(f"expected a span such as 90s, 30m, 24h or 30d, got {value!r}")
        seconds = float(m[1]) * _SPAN_SECONDS[m[2] or "s"]
    if seconds <= 0:
        raise ValueError(f"a span must be positive, got {value!r}")
    return seconds


class VerifyConfig(Strict):
    """``verify: {every: 24h}``: the periodic consistency check (search-center's daily check) that
    ``serve`` or ``sync`` runs between their own work; without ``every`` none is scheduled."""

    every: float | None = Field(
        default=None, description="a span between checks: 90s, 30m, 24h, 30d, 2w, or a number of seconds"
    )

    @field_validator("every", mode="before")
    @classmethod
    def _span(cls, value: Any) -> Any:
        return None if value is None else parse_span(value)
