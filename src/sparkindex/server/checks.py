"""``GET /api/check``: the pipeline's preflight (``sparkindex check``) as the page shows it.

The checks connect to every server the pipeline names (source, store, target, Spark master),
each with a connect timeout: seconds, not milliseconds. So they run on request in a worker thread,
without the probes that write (``probe_writes=False``: a page must never create a slot or an
index), and the result is kept for :data:`CHECK_TTL_S`: a page refreshed, or ten pages open,
cost one run a minute, not one per request. ``?refresh=1`` runs them again at once. Callers that
arrive while a run is in flight wait for it and share its result rather than start their own.

Every line passes through the preflight model, which hides passwords in URLs; a run that
crashed is one FAIL line of the same kind, never a traceback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from sparkindex.config.model import Pipeline
from sparkindex.preflight.model import Check, Options, fail, first_line, overall
from sparkindex.server.responses import ORJSONResponse, query_choice

#: how long a result is served before the checks run again
CHECK_TTL_S = 60.0
STATUSES = ("OK", "WARN", "FAIL")


@dataclass(frozen=True)
class CheckRun:
    checks: Sequence[Check]
    #: wall-clock time the run ended (for people), and the cache's clock then (for the TTL)
    checked_at: float
    ended: float
    seconds: float
    ttl_s: float

    def to_json(self, now: float, cached: bool | None = None) -> dict[str, Any]:
        """The response body; *now* on the cache's clock. *cached*: whether this request was
        served an earlier run (by default: whether the run is older than this instant)."""
        status = overall(self.checks)
        age = max(0.0, now - self.ended)
        return {
            "status": status,
            "ok": status != "FAIL",
            "counts": {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES},
            "checks": [{"name": c.name, "area": c.name.split(".", 1)[0], **_fields(c)} for c in self.checks],
            "checked_at": self.checked_at,
            "seconds": round(self.seconds, 3),
            "age_s": round(age, 3),
            "ttl_s": self.ttl_s,
            "cached": age > 0 if cached is None else cached,
        }


def _fields(check: Check) -> dict[str, Any]:
    return {"status": check.status, "detail": check.detail, "fix": check.fix}


class CheckCache:
    """One run of *run* per *ttl_s*, one at a time; see the module docstring."""

    def __init__(
        self,
        run: Callable[[], Sequence[Check]],
        ttl_s: float = CHECK_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._result: CheckRun | None = None
        #: callers blocked behind a run in flight (tests watch it: no sleep stands in for it)
        self.waiting = 0
        self._count_lock = threading.Lock()

    def get(self, refresh: bool = False) -> CheckRun:
        asked = self.clock()
        with self._count_lock:
            self.waiting += 1
        with self._lock:
            with self._count_lock:
                self.waiting -= 1
            current = self._result
            # a run that ended after this caller asked answers a refresh too: it is as new as
            # any this caller could start (the callers behind one run share it)
            if current is not None and (
                current.ended > asked or (not refresh and self.clock() - current.ended < self.ttl_s)
            ):
                return current
            self._result = self._fresh()
            return self._result

    def _fresh(self) -> CheckRun:
        started = self.clock()
        try:
            checks = list(self._run())
        except Exception as exc:  # noqa: BLE001 - the page shows what went wrong, as check does
            checks = [
                fail(
                    "check",
                    f"the checks could not run: {type(exc).__name__}: {first_line(exc)}",
                    "run `sparkindex check -c <pipeline>` on this machine to see every check",
                )
            ]
        ended = self.clock()
        return CheckRun(checks, time.time(), ended, ended - started, self.ttl_s)


def pipeline_checks(pipeline: Pipeline) -> Callable[[], Sequence[Check]]:
    """What ``sparkindex check`` runs, minus the probes that write (see the module docstring)."""

    def run() -> Sequence[Check]:
        from sparkindex.preflight.runner import run_checks

        return run_checks(pipeline, Options(probe_writes=False))

    return run


def check(request: Request) -> ORJSONResponse:
    """A plain function: Starlette runs it in its thread pool, so the probes never block the
    event loop (and with it the WebSocket ticks)."""
    refresh = query_choice(request, "refresh", ("0", "1", "true", "false")) in ("1", "true")
    cache: CheckCache = request.app.state.checks
    asked = cache.clock()
    result = cache.get(refresh=refresh)
    return ORJSONResponse(result.to_json(cache.clock(), cached=result.ended < asked))


ROUTES = [Route("/api/check", check)]
