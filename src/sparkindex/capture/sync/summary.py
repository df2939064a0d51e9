"""What a sync run reports when it ends: ``sync --json`` prints it, the catch-up reads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SyncSummary:
    applied: int
    deleted: int
    position: int
    lag_s: float
    failed: int = 0
    batches: int = 0
    group: str = "default"
    #: log the source retains for this consumer (a PostgreSQL slot's WAL), None where it keeps none
    lag_bytes: int | None = None
    #: gaps healed by this run: per alias, what the verify/repair found (and fixed)
    reconciled: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
