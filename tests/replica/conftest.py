"""The suite's read replicas are shared: a test here pauses replay (PostgreSQL) or stops the SQL
thread (MariaDB), and resumes it, on the one replica of each server. pytest-xdist runs the modules
of this folder on different workers at once, so one module's resume would end another's pause
mid-test. Every test here that uses a replica holds a lock across processes for its whole run."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

#: beside the servers (scripts/test-services.sh's SERVICES_DIR)
LOCK = Path("/tmp/sparkindex-services/.replicas-in-use.lock")


@pytest.fixture(autouse=True)
def replicas_to_ourselves(request: pytest.FixtureRequest) -> Iterator[None]:
    """Wait until no other worker's test uses the replicas, and hold them through this test."""
    if request.node.get_closest_marker("postgres") is None and request.node.get_closest_marker("mysql") is None:
        yield  # no server, no replica (the config tests)
        return
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
