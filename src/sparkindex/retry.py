"""Capped exponential backoff with full jitter and an optional deadline.

Small and separately tested, so every retry loop (bulk writes, source reads, store reconnects)
behaves the same and never hammers a struggling server in lockstep.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sparkindex.errors import TransientError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Backoff:
    def __init__(
        self,
        initial_s: float = 0.5,
        max_s: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        deadline_s: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self.deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The pause before the next attempt: capped, with up to ``jitter`` of it randomised away."""
        base = min(self.max_s, self.initial_s * self.factor**self.attempt)
        self.attempt += 1
        delay = base * (1 - self.jitter * self._rng.random())
        if self.deadline is not None:
            delay = min(delay, max(0.0, self.deadline - time.monotonic()))
        return delay

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def retry_transient(
    op: Callable[[], T], what: str, attempts: int, backoff: Backoff, sleep: Callable[[float], None] = time.sleep
) -> T:
    """Run *op*, retrying :class:`TransientError` up to *attempts* times; re-raise the last one."""
    for attempt in range(attempts + 1):
        try:
            return op()
        except TransientError as exc:
            if attempt >= attempts or backoff.expired():
                raise
            delay = backoff.next_delay()
            log.warning("%s failed (attempt %d/%d): %s; retrying in %.2fs", what, attempt + 1, attempts + 1, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")
