"""A running sync's health, read from any thread: what ``sync --metrics-port`` serves as
``/healthz`` and ``/livez``, for a host of its own to serve or act on.

    monitor = api.SyncMonitor(stall_after_s=120)
    kwargs = {"until_caught_up": False, "stop": stop, "monitor": monitor}
    threading.Thread(target=api.sync, args=(pipeline,), kwargs=kwargs).start()
    monitor.health()   # api.SyncHealth(status="ok", healthy=True, live=True, ...)

``healthy`` is readiness (the aliases are kept current); ``live`` is liveness (not stuck in a way a
restart may cure). The rule is :mod:`sparkindex.capture.sync.health`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sparkindex.capture.sync.health import STALL_AFTER_S, STATUSES, SyncHealth
from sparkindex.errors import UsageError

__all__ = ["STALL_AFTER_S", "STATUSES", "SyncHealth", "SyncMonitor"]


class SyncMonitor:
    """Hand it to :func:`sparkindex.api.sync` (``monitor=``) and read :meth:`health` from any thread.

    Before the sync runs it says ``starting``; after the call returned, ``stopped``. *stall_after_s*:
    how long the stream may go without advancing while changes wait before it is ``stalled``.
    *group*: the consumer group the health names before the run says (the call's ``group``, or
    the pipeline's ``sync.group``).
    """

    def __init__(self, *, stall_after_s: float = STALL_AFTER_S, group: str = "default") -> None:
        if not stall_after_s > 0:
            raise UsageError(f"stall_after_s: expected a number of seconds above 0, got {stall_after_s!r}")
        self.stall_after_s = float(stall_after_s)
        self.group = group
        self._lock = threading.Lock()
        self._check: Callable[[float], SyncHealth] | None = None
        self._ended = False

    def health(self) -> SyncHealth:
        with self._lock:
            check, ended = self._check, self._ended
        if check is not None:
            return check(self.stall_after_s)
        if ended:
            return SyncHealth(
                "stopped", False, True, self.group, "the sync has ended", stall_after_s=self.stall_after_s
            )
        return SyncHealth(
            "starting", False, True, self.group, "the sync has not started yet", stall_after_s=self.stall_after_s
        )

    def _attach(self, group: str, check: Callable[[float], SyncHealth]) -> None:
        with self._lock:
            self.group, self._check, self._ended = group, check, False

    def _detach(self) -> None:
        with self._lock:
            self._check, self._ended = None, True
