"""Watching a running job: a thread polls the store's aggregated stats and calls a listener.

:class:`ProgressListener` is the reindex's own callback shape; callers never implement it. The
front door adapts it to its one protocol for every call (:class:`sparkindex.api.Progress`, in
``sparkindex/api/progress.py``), as it adapts verify's, the re-drive's and the sync's.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError

from sparkindex.config.secrets import error_line
from sparkindex.coordination.records import EntityStats
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import TransientError

log = logging.getLogger(__name__)


class ProgressListener(Protocol):
    def phase(self, text: str) -> None: ...

    def stats(self, stats: dict[str, EntityStats]) -> None: ...


class SilentProgress:
    def phase(self, text: str) -> None:
        log.info("%s", text)

    def stats(self, stats: dict[str, EntityStats]) -> None:
        return None


class StatsPoller:
    def __init__(self, store: CoordinationStore, job_id: str, listener: ProgressListener, every_s: float = 0.5) -> None:
        self.store = store
        self.job_id = job_id
        self.listener = listener
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkindex-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll(self) -> None:
        try:
            self.listener.stats(self.store.partition_stats.stats(self.job_id))
        except (SQLAlchemyError, TransientError) as exc:  # on the poller's thread: a warning, never a traceback
            log.warning("progress poll failed: %s", error_line(exc))

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.poll()
