"""Keeping the alias locks alive while a job runs (the seed's lock refresh every minute)."""

from __future__ import annotations

import logging
import threading

from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockLost, TransientError

log = logging.getLogger(__name__)


class LockKeeper:
    def __init__(self, store: CoordinationStore, tokens: dict[str, int], ttl_s: float, every_s: float) -> None:
        self.store = store
        self.tokens = tokens
        self.ttl_s = ttl_s
        self.every_s = every_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkindex-lock-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for key, token in self.tokens.items():
                try:
                    self.store.locks.refresh(key, token, self.ttl_s)
                except LockLost as exc:
                    self.lost = str(exc)
                    log.error("%s", exc)
                except TransientError as exc:
                    log.warning("lock refresh for %s failed: %s", key, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
