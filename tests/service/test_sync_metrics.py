"""``sparkindex sync --metrics-port``: a sync run as a service serves ``/metrics`` (under ``serve``'s
names), ``/healthz`` and ``/livez`` from its own process. Started over a backlog, /livez answers 200
throughout; scraped while it runs; ``/healthz`` turns 503 when its stream stalls with changes waiting
(the process that reads the log, SIGSTOPped) and 200 again once it reads on; a SIGTERM ends it
cleanly (exit 0) and frees the port; the index then equals the source. The health rule's other
states (starting, reconciling a gap, held, a batch in flight, a reader that fails, a look at the log
that fails or finds the slot in use, a start-up) are checked on a real run state with a stand-in
log, as are a request that never waits for the log, a run's end that waits for a look, and an
endpoint that closes after its requests in flight."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkindex import api
from sparkindex.capture.sync.health import StreamHealth
from sparkindex.capture.sync.state import RunState
from sparkindex.capture.sync.summary import SyncSummary
from sparkindex.errors import TransientError
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
    shop.sql("UPDATE products SET name = :n WHERE id BETWEEN 10 AND 59", params={"n": HOSTILE[1]})  # a backlog
    proc = LoggedProcess(
        [str(cli), "sync", "-c", config, "--metrics-port", "0", "--stall-after-s", str(STALL_S)],
        shop.directory / "logs",
        start_new_session=True,  # its JVM shares the process group: a SIGKILL in the cleanup takes both
    )
    reader: int | None = None
    livez: list[tuple[int, dict[str, Any]]] = []  # every /livez answer during start-up

    def printed_url() -> str | None:
        found = re.findall(r"http://127\.0\.0\.1:\d+", proc.stderr_text())
        return found[0] if found else None

    def started(http: httpx.Client) -> bool:
        """Ready, and the backlog applied; /livez asked at every poll on the way."""
        code, body = health(http, "/livez")
        livez.append((code, body))
        ready = proc.assert_running("sync") and health(http)[0] == 200
        return ready and (shop.document("59") or {}).get("name") == HOSTILE[1]

    try:
        wait_until(lambda: proc.assert_running("sync") and printed_url() is not None, 120, "the endpoint's URL")
        url = str(printed_url())
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=30) as http:
            # starting: alive, not ready yet; then ok once the stream runs and has applied the backlog
            # (written before the start: Spark's start and the first trigger over it are not a stall)
            wait_until(lambda: started(http), 300, "/healthz 200 and the backlog applied")
            assert health(http)[1]["status"] == "ok" and health(http, "/livez")[0] == 200
            assert livez and all(code == 200 for code, _ in livez), [b for c, b in livez if c != 200]

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
            # (unknown, also 503, may come first: the reader silent for the threshold, the log being read)
            wait_until(
                lambda: proc.assert_running("sync") and health(http)[1]["status"] == "stalled",
                STALL_S + SLACK_S,
                "/healthz 503 stalled",
            )
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


class FakeLog:
    """The change log as the health's look sees it (``open_change_source`` patched to this): each
    look opens it once and asks for the oldest change waiting, which :attr:`answer` gives (or
    raises); :attr:`gate`, when set, holds every look until it opens."""

    def __init__(self) -> None:
        self.opened = 0
        self.answer: Callable[[], Any] = lambda: None
        self.gate: threading.Event | None = None

    def __call__(self, *args: Any) -> FakeLog:
        self.opened += 1
        return self

    def __enter__(self) -> FakeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def oldest_pending(self, acked: Any) -> Any:
        if self.gate is not None:
            self.gate.wait(30)
        return self.answer()

    def committed(self, ago_s: float) -> None:
        """A change committed *ago_s* seconds ago waits."""
        self.answer = lambda: SimpleNamespace(ts=time.time() - ago_s)

    def fails(self, error: BaseException) -> None:
        def answer() -> Any:
            raise error

        self.answer = answer


class SlotInUse(Exception):
    sqlstate = "55006"  # PostgreSQL's object_in_use, as psycopg carries it


def slot_in_use() -> TransientError:
    """What the PostgreSQL change source raises for a slot another session reads: a transient error
    raised while handling the driver's (its context)."""
    try:
        raise SlotInUse('replication slot "feed" is active for PID 4242')
    except SlotInUse as exc:
        try:
            raise TransientError(f"slot 'feed': reading slot 'feed': {exc}") from None
        except TransientError as wrapped:
            return wrapped


@pytest.fixture
def log_(monkeypatch: pytest.MonkeyPatch) -> FakeLog:
    fake = FakeLog()
    monkeypatch.setattr("sparkindex.capture.source.open_change_source", fake)
    return fake


def streaming(log_: FakeLog, *, stall_s: float = STALL_S) -> tuple[RunState, StreamHealth]:
    """A real run state whose query runs, with a health bound to a feed whose log is *log_*."""
    state = RunState(SyncSummary(0, 0, 0, 0.0, group="g"))
    rule = StreamHealth(state, "g")
    feed = SimpleNamespace(
        pipeline=None, source=None, changes=SimpleNamespace(tables=(), consumer="g"), start_offset=lambda: {"lsn": 0}
    )
    rule.bind(cast(Any, feed))
    state.query_started()
    rule.check(stall_s)  # asked once: the looking thread looks from here on when the rule needs it
    return state, rule


def idle_for(state: RunState, seconds: float, *, reader_silent: bool) -> None:
    """No advance for *seconds*; the reader silent as long (its trigger held), or answering now."""
    now = time.monotonic()
    state.last_progress = now - seconds
    state.query_seen_at = now
    state.reader_answered_at = now - seconds if reader_silent else now
    state.progress_seen = (0, "2026-11-29T15:00:00.000Z")  # its first trigger ended long ago


def settled(rule: StreamHealth) -> api.SyncHealth:
    """The health once the look it asked for came back (the looking thread's, never the request's)."""
    found: list[api.SyncHealth] = []

    def looked() -> bool:
        found[:] = [rule.check(STALL_S)]
        return "to tell whether changes wait" not in (found[0].reason or "")

    wait_until(looked, 10, "the health's look at the log")
    return found[0]


def test_the_health_rule_on_a_real_run_state(log_: FakeLog) -> None:
    """Each state the rule tells apart, from the run's own record (no stream needed)."""
    state = RunState(SyncSummary(0, 0, 0, 0.0, group="g"))
    rule = StreamHealth(state, "g")
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("starting", False, True), h
    rule.bind(cast(Any, SimpleNamespace()))  # the feed: only looked at when the log is read
    state.query_started()
    ok = rule.check(STALL_S)
    assert (ok.status, ok.healthy, ok.live) == ("ok", True, True), ok

    state.reconciling.set()  # a gap being reconciled: not ready, but alive (a restart would start it over)
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("reconciling", False, True) and "gap" in (h.reason or ""), h
    state.reconciling.clear()

    state.held.set()  # a reindex's hand-over: waiting is not stalling
    assert rule.check(STALL_S).status == "held" and rule.check(STALL_S).healthy
    state.held.clear()

    idle_for(state, 10 * STALL_S, reader_silent=False)  # no advance for a long while...
    # ...but the reader keeps answering: nothing waits, and the log is not read beside it
    h = rule.check(STALL_S)
    assert (h.status, h.pending) == ("ok", False), h

    state.batch_running.set()  # a batch in flight for that long: not ready, alive (it is working)
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("stalled", False, True) and "in flight" in (h.reason or ""), h
    state.batch_running.clear()
    assert log_.opened == 0, "the log is read only when the reader does not answer"

    state.stop_requested.set()
    assert rule.check(STALL_S).status == "stopping"
    rule.end()
    assert rule.check(STALL_S).status == "stopped"


def test_a_silent_reader_with_changes_waiting_is_stalled_and_not_alive(log_: FakeLog) -> None:
    state, rule = streaming(log_)
    log_.committed(2 * STALL_S)
    idle_for(state, 10 * STALL_S, reader_silent=True)
    h = settled(rule)
    assert (h.status, h.healthy, h.live, h.pending) == ("stalled", False, False, True), h
    assert "not reading" in (h.reason or "") and (h.oldest_pending_s or 0) >= 2 * STALL_S, h
    assert (h.since_reader_s or 0) >= 10 * STALL_S - 1, h

    state.query_running.clear()  # between two queries: the sync starts its own again; not a restart's to cure
    h = settled(rule)
    assert (h.status, h.healthy, h.live) == ("stalled", False, True) and "not running" in (h.reason or ""), h

    log_.answer = lambda: None  # nothing waits: ok, even with a reader that does not answer
    state.query_started()
    idle_for(state, 10 * STALL_S, reader_silent=True)
    h = settled(rule)
    assert (h.status, h.healthy, h.live, h.pending) == ("ok", True, True, False), h
    rule.end()


def test_a_look_that_cannot_read_the_log_is_not_healthy(log_: FakeLog) -> None:
    """The look runs when the reader is silent or down; when it fails too, nothing says the aliases
    are current: unknown, not ready; alive, since a restart cures neither a database that does not
    answer nor a slot the server still decodes a read on."""
    state, rule = streaming(log_)
    log_.fails(TransientError("source postgresql://shop: reading slot 'feed': connection refused"))
    idle_for(state, 10 * STALL_S, reader_silent=True)
    h = settled(rule)
    assert (h.status, h.healthy, h.live, h.pending) == ("unknown", False, True, None), h
    assert "could not read the change log" in (h.reason or "") and "connection refused" in (h.reason or ""), h

    log_.fails(slot_in_use())  # the reader's own read still running on the server, or another client
    wait_until(lambda: "in use" in (rule.check(STALL_S).reason or ""), 10, "the look to find the slot in use")
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("unknown", False, True), h

    state.query_running.clear()  # no query runs, and the log cannot be read
    log_.fails(TransientError("connection refused"))
    wait_until(lambda: "connection refused" in (rule.check(STALL_S).reason or ""), 10, "the look to fail again")
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live) == ("unknown", False, True) and "not running" in (h.reason or ""), h
    rule.end()


def test_a_failing_reader_is_unknown_without_a_look_and_only_for_the_threshold(log_: FakeLog) -> None:
    """A reader that answers with errors is not looked beside (a PostgreSQL slot serves one session
    at a time); its errors count for the stall threshold, not until the next batch."""
    state, rule = streaming(log_)
    log_.committed(2 * STALL_S)
    idle_for(state, 10 * STALL_S, reader_silent=False)
    state.reader_error_at = time.monotonic() - 1
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.live, h.pending) == ("unknown", False, True, None), h
    assert "counted an error" in (h.reason or ""), h
    state.reader_error_at = time.monotonic() - STALL_S - 1  # an error longer ago than the threshold
    h = rule.check(STALL_S)
    assert (h.status, h.healthy, h.pending) == ("ok", True, False), h
    time.sleep(0.6)  # more than the looking thread's tick
    assert log_.opened == 0, "the log was read beside a reader that answers"
    rule.end()


def test_a_start_up_with_a_backlog_is_never_reported_dead(log_: FakeLog) -> None:
    """Preflight, Spark's start and the first trigger over a backlog (the reader's process starting,
    its first read) are not idle time; a trigger held active with progress reported is a reader
    that answers. /livez stays 200 throughout."""
    log_.committed(3600)  # a backlog: changes an hour old wait
    state = RunState(SyncSummary(0, 0, 0, 0.0, group="g"))
    rule = StreamHealth(state, "g")
    seen: list[api.SyncHealth] = []
    feed = SimpleNamespace(
        pipeline=None, source=None, changes=SimpleNamespace(tables=(), consumer="g"), start_offset=lambda: {"lsn": 0}
    )
    rule.bind(cast(Any, feed))
    seen.append(rule.check(STALL_S))
    earlier = time.monotonic() - 10 * STALL_S  # the run state made long before its query starts
    state.last_progress = state.reader_answered_at = state.query_seen_at = earlier
    seen.append(rule.check(STALL_S))
    state.query_started()
    seen.append(rule.check(STALL_S))
    assert seen[-1].status == "ok" and (seen[-1].since_advance_s or 0) < 1, seen[-1]
    state.saw_query(False)  # not triggered yet: not an answer
    # the first trigger stays active for most of the threshold (well past 2 s): still ok
    state.last_progress = state.reader_answered_at = time.monotonic() - 0.9 * STALL_S
    state.saw_query(True)
    seen.append(rule.check(STALL_S))
    # ...and past it (the reader's process starting on a loaded machine, then its first read over
    # the backlog): not known, not ready, alive, and the log is not read beside it
    state.last_progress = state.reader_answered_at = time.monotonic() - 1.5 * STALL_S - 10
    state.saw_query(False)
    seen.append(rule.check(STALL_S))
    assert "not answered yet" in (seen[-1].reason or ""), seen[-1]
    # back-to-back triggers: active at every look, each reporting progress
    state.last_progress = time.monotonic() - 2 * STALL_S
    for batch in range(3):
        state.reader_answered_at = time.monotonic() - 2 * STALL_S
        state.saw_query(True, (batch, f"2026-11-29T15:00:0{batch}.000Z"))
        seen.append(rule.check(STALL_S))
        assert (seen[-1].since_reader_s or 0) < 1, seen[-1]
    state.saw_query(True, (2, "2026-11-29T15:00:02.000Z"))  # the same report again: no news
    state.batch_running.set()  # the first batch over the backlog
    seen.append(rule.check(STALL_S))
    state.batch_running.clear()
    state.advanced()
    seen.append(rule.check(STALL_S))
    time.sleep(0.6)  # more than the looking thread's tick: it had no reason to look
    rule.end()
    assert all(h.live for h in seen), [h for h in seen if not h.live]
    assert [h.status for h in seen[2:]] == ["ok", "ok", "unknown", "ok", "ok", "ok", "stalled", "ok"], seen
    assert log_.opened == 0


def test_the_driver_tells_a_reader_that_answers_from_the_query() -> None:
    """What the driver's loop reads of the query: a trigger seen idle, or a progress report not
    seen before, is a reader that answers; a trigger held with no new report is not."""
    from sparkindex.capture.sync.query import ChangeStream

    state = RunState(SyncSummary(0, 0, 0, 0.0, group="g"))
    state.query_started()
    driver = cast(Any, SimpleNamespace(state=state))
    query = SimpleNamespace(status={"isTriggerActive": True}, lastProgress=None)

    def look(**progress: Any) -> float:
        query.lastProgress = progress or None
        state.reader_answered_at = time.monotonic() - 60
        ChangeStream._look_at_query(driver, query, progress=True)
        return state.query_seen_at - state.reader_answered_at

    assert look() >= 59  # held, nothing reported yet
    query.status = {"isTriggerActive": False}
    assert look() >= 59  # not triggered yet: idle is not an answer before the first report
    query.status = {"isTriggerActive": True}
    assert look(batchId=4, timestamp="2026-11-29T15:00:00.000Z") < 1  # a report: a trigger ended
    assert look(batchId=4, timestamp="2026-11-29T15:00:00.000Z") >= 59  # the same report: no news
    assert look(batchId=4, timestamp="2026-11-29T15:00:10.000Z") < 1  # nothing new, reported 10 s on
    query.status = {"isTriggerActive": False}
    assert look() < 1  # between two triggers


def test_a_request_never_waits_for_the_log_and_the_end_waits_for_a_look(log_: FakeLog) -> None:
    state, rule = streaming(log_)
    log_.gate = threading.Event()
    log_.committed(2 * STALL_S)
    idle_for(state, 10 * STALL_S, reader_silent=True)
    begun = time.monotonic()
    h = rule.check(STALL_S)
    assert time.monotonic() - begun < 0.5 and h.status == "unknown" and not h.healthy, h
    wait_until(lambda: log_.opened == 1, 10, "the look to start")
    h = rule.check(STALL_S)  # answered while the look is held
    assert h.status == "unknown" and "to tell whether changes wait" in (h.reason or ""), h

    ended = threading.Event()
    ender = threading.Thread(target=lambda: (rule.end(), ended.set()))
    ender.start()
    assert not ended.wait(0.5), "the run's end did not wait for the look in flight (it uses the run's sources)"
    log_.gate.set()
    assert ended.wait(10)
    ender.join()
    assert rule.check(STALL_S).status == "stopped"
    time.sleep(0.6)
    assert log_.opened == 1, "a look after the end"


def test_closing_the_endpoint_waits_for_a_request_in_flight(tmp_path: Path) -> None:
    from sparkindex.server.sync_endpoint import SyncEndpoint

    pipeline = make_shop(tmp_path, 10, partition_size=10)
    monitor = api.SyncMonitor(stall_after_s=STALL_S)
    asked, release = threading.Event(), threading.Event()

    def slow(stall_after_s: float) -> api.SyncHealth:
        asked.set()
        release.wait(30)
        return api.SyncHealth("ok", True, True, "default")

    monitor._attach("default", slow)
    endpoint = SyncEndpoint(pipeline, monitor, port=0)
    answers: list[int] = []
    client = threading.Thread(
        target=lambda: answers.append(httpx.get(f"{endpoint.url}/healthz", timeout=30).status_code)
    )
    client.start()
    assert asked.wait(10)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (endpoint.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.5), "closed (the store reads too) while a request was in flight"
    release.set()
    assert closed.wait(10)
    closer.join()
    client.join(10)
    assert answers == [200]
    monitor._detach()


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
