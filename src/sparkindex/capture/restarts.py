"""When a failed change stream is started again, and when a sync gives up.

A live sync runs for weeks. Counting every failure over its lifetime (as the first version did,
five and out) ends it after five unrelated blips; and on a loaded machine a Python worker that
cannot connect back to its JVM within Spark's 15 s fails several query starts in a row for a
minute or two. So the sync gives up only on a stream that keeps failing without progress: after
``max_failures`` failures in a row that acknowledged nothing, and no sooner than ``window_s``
after the first of them. A query that acknowledged a batch before it failed, or that ran longer
than ``window_s`` before it failed (a quiet stream has nothing to acknowledge), starts the count
and the backoff afresh. Bounded runs (``--until-caught-up``, a reindex's catch-up, during which
a live sync stays paused) use a shorter window than a live sync.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkindex.retry import Backoff

#: failures in a row, without an acknowledged batch, before a sync gives up...
MAX_FAILURES = 5
#: ...and no sooner than this long after the first of them (a live sync)
WINDOW_S = 300.0
#: the same for a bounded run (sync --until-caught-up, a reindex's catch-up)
BOUNDED_WINDOW_S = 60.0


class StreamRestarts:
    def __init__(
        self,
        backoff_initial_s: float,
        backoff_max_s: float,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        jitter: float = 1.0,
    ) -> None:
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.max_failures = max_failures
        self.window_s = window_s
        self.clock = clock
        self.jitter = jitter
        self.failures = 0
        self.first_failure_at = 0.0
        self.last_failure_at = 0.0
        self._backoff = self._fresh_backoff()

    def _fresh_backoff(self) -> Backoff:
        return Backoff(self.backoff_initial_s, self.backoff_max_s, jitter=self.jitter)

    def failed(self, progressed: bool) -> float | None:
        """A query failed (*progressed*: it acknowledged a batch first). Returns the pause before
        the next start, or None when the sync should give up."""
        now = self.clock()
        if progressed or self.failures == 0 or now - self.last_failure_at > self.window_s:
            self.failures, self.first_failure_at = 0, now
            self._backoff = self._fresh_backoff()
        self.failures += 1
        self.last_failure_at = now
        if self.failures >= self.max_failures and now - self.first_failure_at >= self.window_s:
            return None
        return self._backoff.next_delay()
