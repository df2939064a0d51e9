"""The Tantivy writer service: one writer per version, started on demand, crash-safe for acked batches."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from sparkindex.targets.tantivy.wire import recv_frame, send_frame

MAPPING = {"properties": {"name": {"type": "text"}, "stock": {"type": "long"}}}


def items(lo: int, hi: int) -> list[BulkItem]:
    return [BulkItem(str(i), orjson.dumps({"name": f"item {i}", "stock": i}), f"h{i}") for i in range(lo, hi)]


def service_pid(target: TantivyTarget, index: str) -> int:
    reply = target._writer_client(index).request({"op": "ping"})
    assert reply is not None
    return int(reply["pid"])


def wait_gone(pid: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):  # reap it if this process started it
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still alive")


@pytest.fixture
def target(tmp_path: Path) -> TantivyTarget:
    return TantivyTarget(TantivyTargetConfig(root=tmp_path, writer_heap_mb=32, writer_threads=1))


def test_acknowledged_batches_survive_a_sigkill_of_the_service(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    assert all(r.ok for r in target.bulk(ix, items(0, 500)))
    pid = service_pid(target, ix)
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    assert target.count(ix) == 500  # acknowledged means committed
    assert all(r.ok for r in target.bulk(ix, items(500, 800)))  # a new service starts on demand
    assert service_pid(target, ix) != pid
    assert target.count(ix) == 800


def test_a_request_cut_by_a_crash_is_transient_and_its_retry_never_duplicates(target: TantivyTarget) -> None:
    ix = target.create_version("t", MAPPING)
    target.bulk(ix, items(0, 100))
    client = target._writer_client(ix)
    pid = service_pid(target, ix)
    sock = client.connect()
    assert sock is not None
    batch = items(100, 300)
    send_frame(sock, {"op": "bulk", "items": []})  # an empty batch is acknowledged at once
    assert recv_frame(sock)[0]["ok"]
    os.kill(pid, signal.SIGKILL)  # the connection is open, as if a batch were in flight
    wait_gone(pid)
    with pytest.raises(ConnectionError):
        send_frame(sock, {"op": "ping"})
        recv_frame(sock)
    sock.close()
    assert client.request({"op": "ping"}, start=False) is None  # nothing runs until a write needs it
    # the caller's retry of the whole batch is an upsert: no duplicates, nothing lost
    assert all(r.ok for r in target.bulk(ix, batch))
    assert all(r.ok for r in target.bulk(ix, batch))
    ids = [i for i, _ in target.scan_hashes(ix)]
    assert len(ids) == len(set(ids)) == 300


def test_the_service_exits_when_idle_and_finish_stops_it(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path, writer_heap_mb=32, writer_threads=1, service_idle_s=0.3))
    ix = target.create_version("t", MAPPING)
    target.bulk(ix, items(0, 10))
    wait_gone(service_pid(target, ix))
    assert target._writer_client(ix).connect(start=False) is None
    target.bulk(ix, items(10, 20))
    pid = service_pid(target, ix)
    target.finish_version(ix)
    wait_gone(pid)
    assert target.count(ix) == 20
