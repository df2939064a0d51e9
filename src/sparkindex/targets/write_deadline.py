"""A deadline for the writes of one thread: a writer working under a lease that can run out in the
middle of a bulk (a partition worker) must not have a request sent, nor resent, after it.

The writer checks its lease before each bulk, but one bulk is many requests (split by count and
bytes, halved on a 413) and a request may wait for its full timeout: a check before the bulk leaves
a window that a stalled network or a SIGSTOP fills, and the late request then lands over the
partition's new owner. So the deadline travels with the thread (a context variable, no signature
change for the targets that do not need it) and a target that sends requests asks
:func:`write_budget_s` before each one: it raises once the deadline has passed, and otherwise gives
the seconds the request may take.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sparkindex.errors import LeaseExpired

#: the monotonic time after which nothing more may be written, read at each request (a renewed
#: lease moves it on)
_VALID_UNTIL: ContextVar[Callable[[], float] | None] = ContextVar("sparkindex_write_deadline", default=None)


@contextmanager
def writes_until(valid_until: Callable[[], float] | None) -> Iterator[None]:
    """Writes made in this context (this thread) end by ``valid_until()``, a ``time.monotonic()``
    value; None sets no deadline."""
    token = _VALID_UNTIL.set(valid_until)
    try:
        yield
    finally:
        _VALID_UNTIL.reset(token)


def write_budget_s(what: str) -> float | None:
    """The seconds the next request of *what* may take, or None without a deadline; raises
    :class:`LeaseExpired` once the deadline has passed."""
    valid_until = _VALID_UNTIL.get()
    if valid_until is None:
        return None
    left = valid_until() - time.monotonic()
    if left <= 0:
        raise LeaseExpired(f"{what}: the lease this write works under ran out {-left:.1f}s ago; it is not sent")
    return left
