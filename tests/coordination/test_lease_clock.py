"""Partition leases are written and judged on the store's clock, not the process's (found in the
chaos campaign's review: heartbeats, the claim's staleness cutoff and the driver's reclaim all read
``time.time()``, so a worker whose wall clock fell behind looked dead while it wrote on, and a
claimer or driver whose clock ran ahead took live partitions over: two writers on one partition).

The process with the jumped clock is real, its wall clock moved by libfaketime
(:mod:`chaos.clock`); the stores are PostgreSQL and MariaDB (SQLite runs inside the process, on
its clock, so there is no second clock to disagree with).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import orjson
import pytest
from chaos.clock import run_python_jumped

from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.store import CoordinationStore
from tests.coordination.helpers import new_job

SERVER_STORES = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]
STALE_AFTER_S = 60.0

#: argv: url, prefix, what ("heartbeat" | "claim" | "reclaim"), job id, partition id, claim token
JUMPED = """
import sys, orjson
from sparkindex.coordination.records import PartitionRecord
from sparkindex.coordination.store import CoordinationStore
url, prefix, what, job_id, pid, token = sys.argv[1:]
store = CoordinationStore(url, prefix)
if what == "heartbeat":
    store.partition_rows.heartbeat(pid, int(token)); out = None
elif what == "claim":
    timeout = float(sys.argv[7]) if len(sys.argv) > 7 else 60.0
    rec = store.partition_rows.claim(pid, "jumped-claimer", "run-jumped", timeout)
    out = None if rec is None else rec.claim_token
elif what == "lock":
    from sparkindex.coordination.recovery import holder_is_dead
    from sparkindex.errors import LockHeld
    try:
        out = store.locks.acquire("products", "jumped-host:1:run-2", 60.0, holder_is_dead=holder_is_dead)
    except LockHeld as exc:
        out = "held"
else:
    out = list(store.partition_resets.reclaim_stale(job_id, 60.0, 3))
print(orjson.dumps({"out": out}).decode())
"""


def _in_jumped_process(tmp_path: Path, jump_s: float, url: str, prefix: str, *args: str) -> object:
    return orjson.loads(run_python_jumped(tmp_path / "clock", jump_s, JUMPED, url, prefix, *args))["out"]


@pytest.fixture
def held(store: CoordinationStore) -> tuple[str, str, PartitionRecord]:
    """(job id, partition id, the claim) of a partition a live holder has just claimed."""
    job_id, (pid, *_) = new_job(store, 2)
    rec = store.partition_rows.claim(pid, "holder", "run-1", STALE_AFTER_S)
    assert rec is not None
    return job_id, pid, rec


@pytest.mark.parametrize("store_url", SERVER_STORES, indirect=True)
def test_a_holder_whose_clock_fell_behind_keeps_its_partition(
    tmp_path: Path, store_url: tuple[str, str], store: CoordinationStore, held: tuple[str, str, PartitionRecord]
) -> None:
    (url, prefix), (job_id, pid, rec) = store_url, held
    # the holder renews from a process whose wall clock is 90 s behind
    _in_jumped_process(tmp_path, -90.0, url, prefix, "heartbeat", job_id, pid, str(rec.claim_token))
    assert store.partition_rows.claim(pid, "other", "run-2", STALE_AFTER_S) is None, (
        "a live holder's partition was taken over"
    )
    assert store.partition_resets.reclaim_stale(job_id, STALE_AFTER_S, 3) == (0, 0)


@pytest.mark.parametrize("store_url", SERVER_STORES, indirect=True)
def test_a_claimer_or_driver_whose_clock_ran_ahead_takes_no_live_partition(
    tmp_path: Path, store_url: tuple[str, str], store: CoordinationStore, held: tuple[str, str, PartitionRecord]
) -> None:
    (url, prefix), (job_id, pid, rec) = store_url, held
    store.partition_rows.heartbeat(pid, rec.claim_token)
    assert _in_jumped_process(tmp_path, 90.0, url, prefix, "claim", job_id, pid, "0") is None
    assert _in_jumped_process(tmp_path, 90.0, url, prefix, "reclaim", job_id, pid, "0") == [0, 0]
    assert store.partition_rows.partition(pid).claim_token == rec.claim_token
    # the control: a partition whose holder really stopped renewing is taken over
    assert store.partition_rows.claim(pid, "other", "run-2", 0.0) is not None


@pytest.mark.parametrize("store_url", SERVER_STORES, indirect=True)
@pytest.mark.parametrize("holder_host", ["another-host", "this-host"])
def test_a_driver_whose_clock_ran_ahead_takes_no_live_alias_lock(
    tmp_path: Path, store_url: tuple[str, str], store: CoordinationStore, holder_host: str
) -> None:
    """Two drivers on one alias, when the second one's clock runs 90 s ahead of a lock the first
    refreshed a moment ago (its 60 s lease)."""
    url, prefix = store_url
    host = socket.gethostname() if holder_host == "this-host" else "another-host"
    token = store.locks.acquire("products", f"{host}:{os.getpid()}:run-1", 60.0)
    assert _in_jumped_process(tmp_path, 90.0, url, prefix, "lock", "-", "-", "0") == "held"
    assert store.locks.get("products").token == token  # type: ignore[union-attr]
    store.locks.check("products", token)
