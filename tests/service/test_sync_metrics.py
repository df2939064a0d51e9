"""``sparkindex sync --metrics-port``: a sync run as a service serves ``/metrics`` (under ``serve``'s
names), ``/healthz`` and ``/livez`` from its own process. Scraped while it runs; ``/healthz`` turns
503 when its stream stalls with changes waiting (the process that reads the log, SIGSTOPped) and
200 again once it reads on; a SIGTERM ends it cleanly (exit 0) and frees the port; the index then
equals the source. The health rule's other states (starting, reconciling a gap, held, a batch in
flight) are checked on a real run state, through the same endpoint."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkindex import api
from sparkindex.capture.sync.health import StreamHealth
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync.summary import SyncSummary
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, wait_until
from tests.cli_process import LoggedProcess
from tests.e2e.shop import make_shop

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
#: the stall threshold the process under test runs with: small, so the test stays short
STALL_S = 3.0
#: what a loaded CI machine may add to it before /healthz says so (health is polled, not slept on)
SLACK_S = 30.0
#: what the process that reads the change log runs (a child of Spark's JVM, one per streaming query)
READER = b"pyspark.sql.streaming.python_streaming_source_runner"
#: the families a sync process serves under serve's names (the store's, for its consumer group)
STORE_FAMILIES = {
    "sparkindex_coordination_up",
    "sparkindex_sync_lag_seconds",
    "sparkindex_sync_offset_age_seconds",
    "sparkindex_sync_documents_applied",
    "sparkindex_sync_documents_deleted",
    "sparkindex_sync_retained_bytes",
    "sparkindex_sync_errors",
}
#: the sync process's own gauges
OWN_FAMILIES = {
    "sparkindex_sync_healthy",
    "sparkindex_sync_live",
    "sparkindex_sync_status",
    "sparkindex_sync_since_advance_seconds",
    "sparkindex_sync_oldest_pending_seconds",
}


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=60)
    shop.reindex(spark)
    shop.sync(spark)  # the slot exists from here on
    yield shop
    drop_pg_shop(shop, services["postgres"])


def children(pid: int) -> list[int]:
    """The processes whose parent is *pid* (from /proc: no psutil in the venv)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def stream_reader(sync_pid: int) -> int | None:
    """The process that reads the change log: Spark's Python process for the streaming source
    (``latestOffset`` runs there), a child of the sync's JVM. Stopping it stalls the stream while
    the sync's own process, and so its HTTP endpoint, runs on."""
    for jvm in children(sync_pid):
        for child in children(jvm):
            try:
                if READER in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child
            except OSError:
                continue
    return None


def families(http: httpx.Client) -> dict[str, Any]:
    response = http.get("/metrics")
    assert response.status_code == 200, response.text
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def applied(http: httpx.Client) -> float:
    family = families(http)["sparkindex_sync_documents_applied"]
    return sum(s.value for s in family.samples if s.labels.get("alias") == "products")


def health(http: httpx.Client, path: str = "/healthz") -> tuple[int, dict[str, Any]]:
    response = http.get(path)
    return response.status_code, response.json()


def serve_family_names(shop: Shop) -> set[str]:
    """The families ``serve`` exposes for this pipeline, from its own collector over its own reads."""
    from prometheus_client import generate_latest

    from sparkindex.server.auth import Guard
    from sparkindex.server.metrics import registry_for
    from sparkindex.server.state import ServerState

    state = ServerState.open(shop.pipeline, shop.directory / "pipeline.yaml", Guard("t", "127.0.0.1"))
    try:
        text = generate_latest(registry_for(state)).decode()
    finally:
        state.close()
    return {f.name for f in text_string_to_metric_families(text)}


def port_is_free(port: int) -> bool:
    """Nothing listens on *port*, and a server may listen there again (as a restarted sync would:
    with SO_REUSEADDR, since connections it served linger in TIME_WAIT)."""
    with socket.socket() as client:
        if client.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            again.bind(("127.0.0.1", port))
            again.listen()
        except OSError:
            return False
    return True


@pytest.mark.postgres
@pytest.mark.slow
def test_a_sync_as_a_service_is_scraped_turns_unhealthy_when_stalled_and_stops_cleanly(shop: Shop, cli: Path) -> None:
    config = str(shop.directory / "pipeline.yaml")
    proc = LoggedProcess(
        [str(cli), "sync", "-c", config, "--metrics-port", "0", "--stall-after-s", str(STALL_S)],
        shop.directory / "logs",
        start_new_session=True,  # its JVM shares the process group: a SIGKILL in the cleanup takes both
    )
    reader: int | None = None

    def printed_url() -> str | None:
        found = re.findall(r"http://127\.0\.0\.1:\d+", proc.stderr_text())
        return found[0] if found else None

    try:
        wait_until(lambda: proc.assert_running("sync") and printed_url() is not None, 120, "the endpoint's URL")
        url = str(printed_url())
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=30) as http:
            # starting: alive, not ready yet; then ok once the stream runs
            wait_until(lambda: proc.assert_running("sync") and health(http)[0] == 200, 300, "/healthz 200")
            assert health(http)[1]["status"] == "ok" and health(http, "/livez")[0] == 200

            # /metrics: serve's names for the sync's series, and the process's own gauges; promtool-clean
            names = set(families(http))
            assert names >= STORE_FAMILIES | OWN_FAMILIES, sorted(names)
            served = serve_family_names(shop)
            assert names - OWN_FAMILIES <= served, sorted(names - OWN_FAMILIES - served)
            assert {n for n in served if n.startswith("sparkindex_sync_")} <= names
            text = http.get("/metrics").text
            lint = subprocess.run(
                [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
            )
            assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), lint.stdout + lint.stderr

            # applied grows after writes
            before = applied(http)
            shop.sql("UPDATE products SET name = :n WHERE id IN (3, 4, 5)", params={"n": HOSTILE[0]})
            wait_until(lambda: proc.assert_running("sync") and applied(http) >= before + 3, 120, "applied to grow by 3")

            # stalled: the reader stopped, a change waiting; /healthz and /livez say so within the threshold
            wait_until(lambda: stream_reader(proc.pid) is not None, 60, "the stream's reader process")
            reader = stream_reader(proc.pid)
            assert reader is not None
            os.kill(reader, signal.SIGSTOP)
            shop.sql("UPDATE products SET name = :n WHERE id = 7", params={"n": HOSTILE[3]})
            written = time.monotonic()
            wait_until(lambda: proc.assert_running("sync") and health(http)[0] == 503, STALL_S + SLACK_S, "503")
            took = time.monotonic() - written
            code, body = health(http)
            assert code == 503 and body["status"] == "stalled" and body["pending"] is True, body
            assert "not reading" in body["reason"] and body["oldest_pending_s"] >= STALL_S, body
            assert health(http, "/livez")[0] == 503  # not reading at all: a restart may cure that
            assert took >= STALL_S - 0.5, f"stalled after {took:.1f} s, before the threshold"
            stalled = families(http)
            assert [s.value for s in stalled["sparkindex_sync_healthy"].samples] == [0]
            status = {s.labels["status"]: s.value for s in stalled["sparkindex_sync_status"].samples}
            assert status["stalled"] == 1 and status["ok"] == 0, status

            # reading again: the change is applied and /healthz is 200 again
            os.kill(reader, signal.SIGCONT)
            reader = None
            wait_until(
                lambda: proc.assert_running("sync") and (shop.document("7") or {}).get("name") == HOSTILE[3],
                120,
                "the waiting change to be applied",
            )
            wait_until(lambda: health(http)[0] == 200, 60, "/healthz 200 again")
            assert health(http)[1]["status"] == "ok"

        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert port_is_free(port), f"port {port} still bound after the sync ended"
        print(f"stalled reported {took:.1f} s after the write (threshold {STALL_S} s)")
    finally:
        if reader is not None:
            os.kill(reader, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill_group()
    report = shop.verify()
    assert report.clean, report.to_dict()


def test_the_health_rule_on_a_real_run_state() -> None:
    """Each state the rule tells apart, from the run's own record (no stream needed)."""
    state = RunState(SyncSummary(0, 0, 0, 0.0, group="g"))
    rule = StreamHealth(state, "g")
    assert (rule.check(STALL_S).status, rule.check(STALL_S).healthy, rule.check(STALL_S).live) == (
        "starting",
        False,
        True,
    )
    rule.bind(cast(Any, object()))  # the feed: only looked at when the log is read
    state.streaming.set()
    state.query_running.set()
    ok = rule.check(STALL_S)
    assert (ok.status, ok.healthy, ok.live) == ("ok", True, True), ok

    state.reconciling.set()  # a gap being reconciled: not ready, but alive (a restart would start it over)
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("reconciling", False, True) and "gap" in (h.reason or ""), h
    state.reconciling.clear()

    state.held.set()  # a reindex's hand-over: waiting is not stalling
    assert rule.check(STALL_S).status == "held" and rule.check(STALL_S).healthy
    state.held.clear()

    state.last_progress = time.monotonic() - 10 * STALL_S  # no advance for a long while...
    # ...but the reader keeps answering (its trigger is not held): nothing waits
    h = rule.check(STALL_S)
    assert (h.status, h.pending) == ("ok", False), h

    state.batch_running.set()  # a batch in flight for that long: not ready, alive (it is working)
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("stalled", False, True) and "in flight" in (h.reason or ""), h
    state.batch_running.clear()

    state.stop_requested.set()
    assert rule.check(STALL_S).status == "stopping"
    rule.end()
    assert rule.check(STALL_S).status == "stopped"


def test_the_endpoint_says_so_while_a_gap_is_reconciled_and_frees_its_port(tmp_path: Path) -> None:
    from sparkindex.server.sync_endpoint import SyncEndpoint

    pipeline = make_shop(tmp_path, 10, partition_size=10)
    state = RunState(SyncSummary(0, 0, 0, 0.0, group="default"))
    rule = StreamHealth(state, "default")
    monitor = api.SyncMonitor(stall_after_s=STALL_S)
    with SyncEndpoint(pipeline, monitor, port=0) as endpoint, httpx.Client(base_url=endpoint.url, timeout=30) as http:
        assert health(http) == (503, health(http)[1]) and health(http)[1]["status"] == "starting"
        assert health(http, "/livez")[0] == 200
        monitor._attach("default", rule.check)
        state.reconciling.set()
        code, body = health(http)
        assert (code, body["status"], body["healthy"]) == (503, "reconciling", False), body
        assert "gap" in body["reason"]
        assert health(http, "/livez")[0] == 200
        status = {s.labels["status"]: s.value for s in families(http)["sparkindex_sync_status"].samples}
        assert status["reconciling"] == 1, status
        assert http.get("/nothing").status_code == 404 and http.post("/healthz").status_code == 405
        port = endpoint.port
    assert port_is_free(port)
    monitor._detach()
    assert monitor.health().status == "stopped"


def test_a_metrics_port_in_use_is_refused_before_the_sync_starts(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, 10, partition_size=10)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [str(cli), "sync", "-c", str(tmp_path / "pipeline.yaml"), "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert run.returncode == 2, run.stderr[-3000:]
    assert f"cannot listen on 127.0.0.1:{port}" in run.stderr, run.stderr
    assert not (tmp_path / ".sparkindex" / "spark.log").exists(), "Spark never started"
