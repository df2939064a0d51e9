"""Keeping the alias locks alive while a job runs (refreshed every ``job.lock_refresh_s``).

A refresh that fails because the store is unreachable (a restart, a dropped connection) is not a
lost lock: the keeper logs it and tries again at the next tick, since the lock stays ours until
its TTL runs out. The lock is declared lost only when the store says another holder took it
(:class:`LockLost`), or when refreshes have failed for as long as the TTL, after which anybody may
have taken it. Then ``on_lost`` is called once (the driver cancels its Spark job with it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockLost, TransientError

log = logging.getLogger(__name__)


class LockKeeper:
    def __init__(
        self,
        store: CoordinationStore,
        tokens: dict[str, int],
        ttl_s: float,
        every_s: float,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.ttl_s = ttl_s
        self.every_s = every_s
        self.on_lost = on_lost
        self.lost: str | None = None
        #: lost because refreshes failed for as long as the TTL (the store out of reach), not
        #: because the store said another holder took it (how ``sparkindex stop`` asks a sync)
        self.expired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkindex-lock-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        # The lock is ours until ttl_s after the start of the last refresh the store accepted.
        renewed = dict.fromkeys(self.tokens, time.monotonic())
        while self.lost is None and not self._stop.wait(self.every_s):
            for key, token in self.tokens.items():
                started = time.monotonic()
                try:
                    self.store.locks.refresh(key, token, self.ttl_s)
                    renewed[key] = started
                except LockLost as exc:
                    self._declare_lost(str(exc))
                    return
                except (SQLAlchemyError, TransientError, OSError) as exc:
                    down_s = time.monotonic() - renewed[key]
                    log.warning("lock refresh for %s failed (%.1f s since the last one): %s", key, down_s, exc)
                    if down_s >= self.ttl_s:
                        self.expired = True
                        self._declare_lost(
                            f"lock {key!r}: refreshes failed for {down_s:.0f} s, beyond its TTL of "
                            f"{self.ttl_s:.0f} s; another driver may hold it now"
                        )
                        return
                except Exception as exc:  # a bug here must not silently leave the lock to expire
                    log.exception("lock keeper for %s stopped on an unexpected error", key)
                    self._declare_lost(f"lock {key!r}: the keeper stopped on {exc!r}")
                    return

    def _declare_lost(self, message: str) -> None:
        self.lost = message
        log.error("%s", message)
        if self.on_lost is not None:
            try:
                self.on_lost(message)
            except Exception:  # the driver's callback failing must not hide the loss: it stays in .lost
                log.exception("on_lost callback failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
