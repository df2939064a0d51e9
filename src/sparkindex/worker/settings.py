"""How a partition worker paces its reads and writes (one set per job, shipped to every task)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkindex.retry import Backoff


@dataclass(frozen=True)
class WorkerSettings:
    batch_size: int = 5000
    batch_bytes: int = 16 * 1024 * 1024
    retries: int = 5
    partition_retries: int = 3
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    claim_timeout_s: float = 300.0
    #: how long a partition whose target is down stays CLOSED before it may be claimed again
    reopen_after_s: float = 30.0
    #: bulks on their way while the next batch is read and built (acknowledged in order)
    max_in_flight: int = 2
    #: how often applied batches are made durable and their cursors saved (targets with group
    #: commits); a crash redoes at most about this much work per running partition
    sync_every_s: float = 10.0

    def backoff(self) -> Backoff:
        return Backoff(self.backoff_initial_s, self.backoff_max_s)


__all__ = ["WorkerSettings"]
