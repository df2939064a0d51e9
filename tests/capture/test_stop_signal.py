"""``sparkindex stop`` signals a sync's process only when that process stops cleanly on SIGTERM
(the CLI's); a sync embedded in another program is stopped by taking its lock over alone, since
SIGTERM's default action would kill its host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

import pytest

from sparkindex import api
from sparkindex.capture.control import request_sync_stop
from sparkindex.capture.sync_lock import LOCK_TTL_S, STOPS_ON_SIGTERM, source_key, sync_lock_key
from sparkindex.config.model import Pipeline
from sparkindex.coordination.recovery import holder_name
from sparkindex.resources import open_store


def _pipeline(tmp_path: Path) -> Pipeline:
    return api.load(
        f"source: {{url: 'sqlite:///{tmp_path}/shop.db'}}\n"
        "target: {url: 'tantivy://index'}\n"
        f"coordination: {{url: 'sqlite:///{tmp_path}/state.db'}}\n"
        "indexes:\n  - {alias: products, table: products}\n"
    )


def test_an_embedded_sync_is_not_signalled_its_lock_is_taken_over(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    received: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, record)  # were it sent, the test sees it instead of dying
    try:
        with open_store(pipeline) as store:
            key = sync_lock_key(pipeline.sync.group, source_key(pipeline))
            store.locks.acquire(key, holder_name("embedded"), LOCK_TTL_S)  # this process's own sync
            assert request_sync_stop(store, pipeline) == holder_name("embedded")
            assert received == [], "an embedded sync's host must not get SIGTERM"
            lock = store.locks.get(key)
            assert lock is None or lock.expires_at <= 0, "the lock is taken over: the sync's keeper stops it"
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("marked", [True, False])
def test_only_a_sync_that_stops_on_sigterm_is_signalled(tmp_path: Path, marked: bool) -> None:
    """A child process stands in for a sync on this host: signalled only when its holder says so."""
    pipeline = _pipeline(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        holder = f"{os.uname().nodename}:{child.pid}:run" + (STOPS_ON_SIGTERM if marked else "")
        with open_store(pipeline) as store:
            store.locks.acquire(sync_lock_key(pipeline.sync.group, source_key(pipeline)), holder, LOCK_TTL_S)
            assert request_sync_stop(store, pipeline) == holder
        if marked:
            assert child.wait(30) == -signal.SIGTERM
        else:
            with pytest.raises(subprocess.TimeoutExpired):
                child.wait(2)  # bounded look: a signal lands at once; none must land here
    finally:
        child.kill()
        child.wait()
