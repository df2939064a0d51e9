"""``/ws``: every tick (2 s) each client gets the live jobs' progress, sync lag, each alias's last
verify and the syncs' gaps.

One ticker reads the store for everyone (not one reader per client), in a worker thread so the
event loop keeps serving. A job that ended since the previous tick is sent once more in its final
state, so a client always sees COMPLETED (or FAILED) and never a job that silently vanishes. A
client may ask to watch one job (``{"watch": "<job id>"}``): its messages then also carry that
job's partitions, recent dead letters and docs/s history, the page's live view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import orjson
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from sparkindex.coordination.views import ACTIVE_JOB_STATES
from sparkindex.server.progress import job_progress, reconstructed_history
from sparkindex.server.state import ServerState
from sparkindex.server.sync_gaps import gap_groups
from sparkindex.server.verified import plain_runs, verified_aliases

log = logging.getLogger(__name__)
WATCH_PARTITIONS_MAX = 5000  # a grid larger than this is cut (the REST endpoint has them all)
WATCH_DEAD_LETTERS = 50
CLOCK_MARGIN_S = 10.0


def watched_job(state: ServerState, job_id: str) -> dict[str, Any] | None:
    """One job's live view: progress, partitions, dead letters, docs/s over time (blocking)."""
    job = state.views.job(job_id)
    if job is None:
        return None
    stats = state.views.stats(job_id)
    letters = state.views.dead_letters(job_id=job_id, limit=WATCH_DEAD_LETTERS)
    partitions = state.views.partitions(job_id)
    history = state.tracker.history(job_id)
    source = "observed"
    if len(history) < 2:  # a job this server did not watch (or only just began to)
        history, source = reconstructed_history(partitions), "reconstructed from partition times"
    return {
        "job": job_progress(job, stats, state.tracker, state.views.dead_letter_total(job_id)),
        "partitions": [p.to_dict() for p in partitions[:WATCH_PARTITIONS_MAX]],
        "partitionsTotal": len(partitions),
        "deadLetters": [d.__dict__ for d in letters],
        "history": {"source": source, "points": [[round(t, 3), round(r, 1)] for t, r in history]},
    }


class Hub:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.clients: dict[WebSocket, str | None] = {}
        self.last: dict[str, Any] | None = None
        self._last_tick: float | None = None  # before the first tick, no job has "just ended"
        self._reported_final: dict[str, float] = {}  # job id -> when it was sent in its final state
        self._task: asyncio.Task[None] | None = None
        self._snapshot_lock = threading.Lock()

    # -- the ticker --------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Live jobs (and those that ended since the last tick), sync lag, last verify (blocking)."""
        with self._snapshot_lock:  # the ticker and a first client may ask at once
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        now = time.time()
        views = self.state.views
        # A margin for clocks: completed_at is the driver's time, perhaps on another machine.
        since = None if self._last_tick is None else self._last_tick - CLOCK_MARGIN_S
        jobs = views.active_jobs(finished_since=since)
        jobs = [j for j in jobs if j.status in ACTIVE_JOB_STATES or j.id not in self._reported_final]
        progress = []
        for job in jobs:
            stats = views.stats(job.id)
            if str(job.status) in ("RUNNING", "READY", "STOPPING"):
                self.state.tracker.observe(job.id, stats, now)
            progress.append(job_progress(job, stats, self.state.tracker, views.dead_letter_total(job.id), now))
        live = [j.id for j in jobs if j.status in ACTIVE_JOB_STATES]
        self.state.tracker.forget(live)
        for job in jobs:
            if job.status in ACTIVE_JOB_STATES:
                self._reported_final.pop(job.id, None)  # resumed by a rerun: final again later
            else:
                self._reported_final[job.id] = now
        for job_id, at in list(self._reported_final.items()):
            if now - at > 2 * CLOCK_MARGIN_S:
                del self._reported_final[job_id]
        self._last_tick = now
        last = self.state.actions.latest(("verify", "repair"))
        runs = plain_runs(views.verify_runs())
        return {
            "type": "progress",
            "time": now,
            "jobs": progress,
            "sync": [c.to_dict() for c in self.state.sync_consumers()],
            "verify": {"runs": runs, "lastAction": None if last is None else last.to_dict()},
            "verified": verified_aliases(self.state, runs),
            "gaps": gap_groups(self.state),
            "actions": [a.to_dict() for a in self.state.actions.running()],
        }

    async def tick(self) -> None:
        try:
            self.last = await run_in_threadpool(self.snapshot)
        except SQLAlchemyError as exc:
            log.warning("progress tick: the coordination store did not answer: %s", type(exc).__name__)
            self.last = {"type": "error", "time": time.time(), "error": "the coordination store did not answer"}
        watched: dict[str, dict[str, Any] | None] = {}
        for ws, job_id in list(self.clients.items()):
            if job_id is not None and job_id not in watched:
                watched[job_id] = await self._watched(job_id)
            await self._send(ws, self.last, None if job_id is None else watched[job_id])

    async def _watched(self, job_id: str) -> dict[str, Any] | None:
        try:
            return await run_in_threadpool(watched_job, self.state, job_id)
        except SQLAlchemyError:
            return None

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:  # whatever one tick hit, the page must keep its updates (logged)
                log.exception("progress tick failed")
            await asyncio.sleep(max(0.1, self.state.tick_s - (time.monotonic() - started)))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for ws in list(self.clients):
            try:
                await ws.close(code=1001)
            except Exception as exc:  # noqa: BLE001 - one client that cannot be told must not keep the rest from it
                log.warning("a WebSocket client could not be told the server is going away: %s", exc)

    # -- clients -----------------------------------------------------------------------------------
    async def _send(self, ws: WebSocket, message: dict[str, Any] | None, watch: dict[str, Any] | None) -> None:
        if message is None:
            return
        body = dict(message)
        if watch is not None:
            body["watch"] = watch
        text = orjson.dumps(body).decode()  # a message that cannot be encoded is our bug: logged, not a client's
        try:
            await asyncio.wait_for(ws.send_text(text), timeout=10)
        except Exception:  # noqa: BLE001 - a client that cannot take a message is dropped, whatever the cause
            self.clients.pop(ws, None)

    async def serve(self, ws: WebSocket) -> None:
        """One client: the latest snapshot at once, then every tick; ``{"watch": id|null}`` messages."""
        problem = self.state.guard.host_problem(ws)
        if problem is None and not self.state.guard.may_read(ws):
            problem = "this server's views need the token from outside this machine"
        if problem is not None:
            await ws.close(code=1008, reason=problem[:120])
            return
        await ws.accept()
        self.clients[ws] = None
        try:
            if self.last is None:
                self.last = await run_in_threadpool(self.snapshot)
            await self._send(ws, self.last, None)
            while True:
                raw = await ws.receive_text()
                try:
                    request = orjson.loads(raw)
                    job_id = request.get("watch") if isinstance(request, dict) else None
                except orjson.JSONDecodeError:
                    job_id = None
                if job_id is not None and not isinstance(job_id, str):
                    job_id = None
                self.clients[ws] = job_id
                if job_id is not None and ws in self.clients:
                    await self._send(ws, self.last, await self._watched(job_id))
        except WebSocketDisconnect:
            pass
        finally:
            self.clients.pop(ws, None)
