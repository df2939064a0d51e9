"""The cache in front of `/api/check`: one run per TTL however many pages ask, one run at a time
however many ask at once, a forced refresh, and a run that crashed shown as a FAIL line (its
password hidden) instead of an error page. The checks here are stand-ins that count their runs:
what is under test is the cache, whose real checks test_health_api runs against real servers."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from sparkindex.preflight.model import Check, fail, ok
from sparkindex.server.checks import CheckCache
from tests.e2e.shop import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counting:
    """Checks that count their runs; *gate*, when set, holds each run until it is opened."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.runs = 0
        self.gate = gate
        self.started = threading.Event()

    def __call__(self) -> Sequence[Check]:
        self.runs += 1
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30)
        return [ok("source.reachable", f"run {self.runs}"), fail("target.reachable", "refused", "start it")]


def test_results_are_kept_for_the_ttl_and_a_refresh_runs_again() -> None:
    clock, checks = Clock(), Counting()
    cache = CheckCache(checks, ttl_s=60, clock=clock)
    first = cache.get()
    assert checks.runs == 1 and first.to_json(clock())["cached"] is False
    clock.now += 59
    again = cache.get()
    assert again is first and checks.runs == 1
    body = again.to_json(clock())
    assert body["cached"] is True and body["age_s"] == 59 and body["status"] == "FAIL"
    assert body["counts"] == {"OK": 1, "WARN": 0, "FAIL": 1} and body["ok"] is False
    assert body["checks"][1] == {
        "name": "target.reachable",
        "area": "target",
        "status": "FAIL",
        "detail": "refused",
        "fix": "start it",
    }
    clock.now += 2
    assert cache.get() is not first and checks.runs == 2, "expired after the TTL"
    assert cache.get(refresh=True).checks[0].detail == "run 3"


def test_callers_at_once_share_one_run() -> None:
    gate = threading.Event()
    checks = Counting(gate)
    cache = CheckCache(checks, ttl_s=60)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(refresh=True))) for _ in range(4)]
    threads[0].start()
    assert checks.started.wait(30)
    for t in threads[1:]:
        t.start()
    wait_for(lambda: cache.waiting == 3, 30, "the other callers to wait for the run in flight")
    gate.set()
    for t in threads:
        t.join(30)
    assert checks.runs == 1 and len(got) == 4 and all(g is got[0] for g in got)


def test_a_run_that_crashed_is_one_fail_line_without_secrets() -> None:
    def crash() -> Sequence[Check]:
        raise RuntimeError("cannot open postgresql://indexer:hunter2@db:5432/shop\nsecond line")

    body = CheckCache(crash).get().to_json(0.0)
    [line] = body["checks"]
    assert line["status"] == "FAIL" and line["name"] == "check"
    assert "hunter2" not in str(body) and "RuntimeError" in line["detail"] and "second line" not in line["detail"]
    assert line["fix"]
