"""The state-changing endpoints: start a reindex, stop a job, re-drive dead letters, verify/repair.

All need the bearer token (checked by the app's guard before these run). Long work runs as a CLI
subprocess (see :mod:`actions`) and answers 202 with the action to poll; a stop is one store
transition, the same the ``stop`` command makes, and answers at once. Values from the request
reach the command line only as ``--option=value`` (a value starting with ``-`` cannot become an
option) and aliases only when the pipeline defines them.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from sparkindex.coordination.states import JobStatus
from sparkindex.errors import IllegalTransition, LockLost
from sparkindex.server.actions import Action
from sparkindex.server.api import job_row
from sparkindex.server.responses import BadRequest, ORJSONResponse, json_body
from sparkindex.server.state import ServerState

STOPPABLE = (JobStatus.READY, JobStatus.RUNNING)


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


def _aliases(state: ServerState, body: dict[str, Any]) -> list[str]:
    chosen = body.get("index")
    if chosen is None:
        return []
    if not all(isinstance(a, str) for a in chosen):
        raise BadRequest("request body: field 'index' must be a list of alias names")
    unknown = [a for a in chosen if a not in state.aliases]
    if unknown:
        raise BadRequest(
            f"request body: field 'index': {', '.join(map(repr, unknown))} not in this pipeline "
            f"(aliases: {', '.join(state.aliases)})"
        )
    return list(dict.fromkeys(chosen))


def _accepted(action: Action) -> ORJSONResponse:
    return ORJSONResponse(
        {"action": action.to_dict()}, status_code=202, headers={"Location": f"/api/actions/{action.id}"}
    )


def _busy_aliases(state: ServerState, aliases: list[str]) -> list[str]:
    """Aliases a live driver holds now (its lock has not expired): a reindex of them would only
    start Spark to be refused."""
    live = state.store.locks.unexpired(aliases)  # on the store's clock: the drivers' leases are
    return [f"{lock.key!r} (job {lock.job_id}, held by {lock.holder})" for lock in live]


async def start_reindex(request: Request) -> ORJSONResponse:
    state = _state(request)
    body = await json_body(request, {"index": list, "new": bool})
    aliases = _aliases(state, body)
    targets = aliases or state.aliases
    mine = [a for a in state.actions.running("reindex") if set(a.meta.get("aliases", [])) & set(targets)]
    if mine:
        raise BadRequest(f"a reindex of these aliases is already running (action {mine[0].id})", status=409)
    held = await run_in_threadpool(_busy_aliases, state, targets)
    if held:
        raise BadRequest(f"a reindex is already running for {', '.join(held)}", status=409)
    argv = ["reindex", "-c", str(state.config_path), *(f"--index={a}" for a in aliases)]
    if body.get("new"):
        argv.append("--new")
    action = await state.actions.start("reindex", [*argv, "--json"], aliases=targets)
    return _accepted(action)


def _stop(state: ServerState, job_id: str) -> dict[str, Any]:
    job = state.views.job(job_id)
    if job is None:
        raise BadRequest(f"job {job_id!r} not found in the coordination store", status=404)
    if job.status not in STOPPABLE:
        raise BadRequest(f"job {job_id} is {job.status}: only a READY or RUNNING job can be stopped", status=409)
    try:
        stopped = state.store.job_rows.transition_job(job.id, JobStatus.STOPPING)
    except (IllegalTransition, LockLost) as exc:  # it moved on between the read and the write
        raise BadRequest(f"job {job_id} could not be stopped: {exc}", status=409) from None
    return job_row(stopped)


async def stop_job(request: Request) -> ORJSONResponse:
    """Ask the job to stop gracefully: its tasks hand their partitions back; a reindex resumes it."""
    state = _state(request)
    row = await run_in_threadpool(_stop, state, request.path_params["job_id"])
    return ORJSONResponse({"job": row})


async def redrive(request: Request) -> ORJSONResponse:
    state = _state(request)
    body = await json_body(request, {"alias": str, "error_class": str})
    argv = ["dlq", "redrive", "-c", str(state.config_path)]
    alias = body.get("alias")
    if alias is not None:
        if alias not in state.aliases:
            raise BadRequest(
                f"request body: field 'alias': {alias!r} not in this pipeline (aliases: {', '.join(state.aliases)})"
            )
        argv.append(f"--alias={alias}")
    if body.get("error_class"):
        argv.append(f"--error-class={body['error_class']}")
    if state.actions.running("redrive"):
        raise BadRequest("a re-drive is already running", status=409)
    return _accepted(await state.actions.start("redrive", [*argv, "--json"]))


async def verify(request: Request) -> ORJSONResponse:
    state = _state(request)
    body = await json_body(request, {"index": list, "repair": bool})
    aliases = _aliases(state, body)
    running = [a for a in state.actions.running() if a.kind in ("verify", "repair")]
    if running:
        raise BadRequest(f"a verify is already running (action {running[0].id})", status=409)
    kind = "repair" if body.get("repair") else "verify"
    return _accepted(await start_verify(state, kind, aliases))


async def start_verify(state: ServerState, kind: str, aliases: list[str]) -> Action:
    argv = ["verify", "-c", str(state.config_path), *(f"--index={a}" for a in aliases)]
    if kind == "repair":
        argv.append("--repair")
    return await state.actions.start(kind, [*argv, "--json"], aliases=aliases or state.aliases)


ROUTES = [
    Route("/api/reindex", start_reindex, methods=["POST"]),
    Route("/api/jobs/{job_id}/stop", stop_job, methods=["POST"]),
    Route("/api/dead-letters/redrive", redrive, methods=["POST"]),
    Route("/api/verify", verify, methods=["POST"]),
]
