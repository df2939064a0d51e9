"""The read-only REST endpoints: jobs, one job, its partitions, dead letters, sync consumers, actions.

Handlers are plain functions: Starlette runs them in its thread pool, so a slow store never
blocks the event loop (and with it the WebSocket ticks).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from sparkindex.coordination.records import JobRecord
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.server.progress import job_progress
from sparkindex.server.responses import BadRequest, ORJSONResponse, query_choice, query_int
from sparkindex.server.state import ServerState
from sparkindex.server.verified import plain_runs
from sparkindex.server.ws import watched_job

ERRORS_SHOWN = 100


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


def _job_or_404(state: ServerState, job_id: str) -> JobRecord:
    job = state.views.job(job_id)
    if job is None:
        raise BadRequest(f"job {job_id!r} not found in the coordination store", status=404)
    return job


def job_row(job: JobRecord) -> dict[str, Any]:
    end = job.completed_at or time.time()
    return {
        "id": job.id,
        "aliases": list(job.aliases),
        "status": str(job.status),
        "indexes": job.targets,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "completed_at": job.completed_at,
        "updated_at": job.updated_at,
        "seconds": None if job.started_at is None else round(end - job.started_at, 3),
        "error": job.error_message,
    }


def index(request: Request) -> ORJSONResponse:
    return ORJSONResponse(
        {
            "endpoints": [
                "GET /api/pipeline",
                "GET /api/jobs?limit=&status=",
                "GET /api/jobs/{id}",
                "GET /api/jobs/{id}/partitions?status=&entity=",
                "GET /api/jobs/{id}/live",
                "GET /api/dead-letters?alias=&error_class=&job_id=&limit=",
                "GET /api/dead-letters/summary?job_id=",
                "GET /api/sync",
                "GET /api/sync/gaps?group=&limit=",
                "GET /api/check?refresh=1",
                "GET /api/actions",
                "GET /api/actions/{id}",
                "GET /api/verify",
                "GET /api/verify/aliases",
                "POST /api/reindex {index?: [alias], new?: bool}  (token)",
                "POST /api/jobs/{id}/stop  (token)",
                "POST /api/dead-letters/redrive {alias?, error_class?}  (token)",
                "POST /api/verify {index?: [alias], repair?: bool}  (token)",
                'WS /ws  (send {"watch": job_id} for one job\'s live view)',
                "GET /metrics",
            ]
        }
    )


def pipeline(request: Request) -> ORJSONResponse:
    return ORJSONResponse(_state(request).describe())


def jobs(request: Request) -> ORJSONResponse:
    state = _state(request)
    limit = query_int(request, "limit", 50, 1, 1000)
    status = query_choice(request, "status", [str(s) for s in JobStatus])
    records = state.views.jobs(limit=limit, statuses=None if status is None else [status])
    totals = state.views.totals([j.id for j in records])
    rows = []
    for job in records:
        t = totals.get(job.id)
        row = job_row(job)
        row.update(
            total=0 if t is None else max(t.total, t.processed),
            processed=0 if t is None else t.processed,
            success=0 if t is None else t.success,
            failed=0 if t is None else t.failed,
            partitions={} if t is None else t.partitions,
        )
        rows.append(row)
    return ORJSONResponse({"jobs": rows})


def job(request: Request) -> ORJSONResponse:
    """One job: progress per entity (the WebSocket's shape), partition states, errors and timings."""
    state = _state(request)
    record = _job_or_404(state, request.path_params["job_id"])
    stats = state.views.stats(record.id)
    partitions = state.views.partitions(record.id)
    durations = [p.completed_at - p.started_at for p in partitions if p.completed_at and p.started_at]
    failing = [p for p in partitions if p.last_error]
    letters = state.views.dead_letter_counts(job_id=record.id)
    return ORJSONResponse(
        {
            "job": job_row(record),
            "progress": job_progress(record, stats, state.tracker, sum(letters.values())),
            "timings": {
                "created_at": record.created_at,
                "started_at": record.started_at,
                "completed_at": record.completed_at,
                "partition_seconds": None
                if not durations
                else {
                    "min": round(min(durations), 3),
                    "median": round(statistics.median(durations), 3),
                    "max": round(max(durations), 3),
                    "count": len(durations),
                },
            },
            "errors": {
                "job": record.error_message,
                "partitions": [
                    {
                        "id": p.id,
                        "entity": p.entity,
                        "index": p.index,
                        "status": p.status,
                        "retries": p.retries,
                        "last_error": p.last_error,
                    }
                    for p in failing[:ERRORS_SHOWN]
                ],
                "partitions_with_errors": len(failing),
                "dead_letters": [{"alias": a, "error_class": c, "count": n} for (a, c), n in sorted(letters.items())],
            },
        }
    )


def job_live(request: Request) -> ORJSONResponse:
    """What the WebSocket sends a client watching this job, for one look without a socket."""
    state = _state(request)
    view = watched_job(state, request.path_params["job_id"])
    if view is None:
        raise BadRequest(f"job {request.path_params['job_id']!r} not found in the coordination store", status=404)
    return ORJSONResponse(view)


def partitions(request: Request) -> ORJSONResponse:
    state = _state(request)
    record = _job_or_404(state, request.path_params["job_id"])
    status = query_choice(request, "status", [str(s) for s in PartitionStatus])
    entity = request.query_params.get("entity")
    rows = state.views.partitions(record.id, status=status, entity=entity)
    return ORJSONResponse({"job_id": record.id, "partitions": [p.to_dict() for p in rows]})


def dead_letters(request: Request) -> ORJSONResponse:
    state = _state(request)
    q = request.query_params
    limit = query_int(request, "limit", 100, 1, 10_000)
    alias = q.get("alias")
    if alias is not None and alias not in state.aliases:
        raise BadRequest(
            f"query parameter 'alias': {alias!r} is not an alias of this pipeline ({', '.join(state.aliases)})"
        )
    items = state.views.dead_letters(alias=alias, error_class=q.get("error_class"), job_id=q.get("job_id"), limit=limit)
    return ORJSONResponse({"dead_letters": [d.__dict__ for d in items]})


def dead_letter_summary(request: Request) -> ORJSONResponse:
    counts = _state(request).views.dead_letter_counts(job_id=request.query_params.get("job_id"))
    return ORJSONResponse(
        {"classes": [{"alias": a, "error_class": c, "count": n} for (a, c), n in sorted(counts.items())]}
    )


def sync(request: Request) -> ORJSONResponse:
    return ORJSONResponse({"consumers": [c.to_dict() for c in _state(request).sync_consumers()]})


def actions(request: Request) -> ORJSONResponse:
    return ORJSONResponse({"actions": [a.to_dict() for a in _state(request).actions.newest_first()]})


def action(request: Request) -> ORJSONResponse:
    found = _state(request).actions.get(request.path_params["action_id"])
    if found is None:
        raise BadRequest(
            f"action {request.path_params['action_id']!r} not found (actions live as long as the server)", 404
        )
    return ORJSONResponse(found.to_dict())


def verify_status(request: Request) -> ORJSONResponse:
    """The newest recorded run of each alias (whoever ran it), the schedule, and this server's checks."""
    state = _state(request)
    last = state.actions.latest(("verify", "repair"))
    return ORJSONResponse(
        {
            "every_s": state.pipeline.verify.every,
            "runs": plain_runs(state.views.verify_runs()),
            "running": [a.to_dict() for a in state.actions.running() if a.kind in ("verify", "repair")],
            "last": None if last is None else last.to_dict(),
        }
    )


ROUTES = [
    Route("/api", index),
    Route("/api/pipeline", pipeline),
    Route("/api/jobs", jobs),
    Route("/api/jobs/{job_id}", job),
    Route("/api/jobs/{job_id}/live", job_live),
    Route("/api/jobs/{job_id}/partitions", partitions),
    Route("/api/dead-letters", dead_letters),
    Route("/api/dead-letters/summary", dead_letter_summary),
    Route("/api/sync", sync),
    Route("/api/actions", actions),
    Route("/api/actions/{action_id}", action),
    Route("/api/verify", verify_status, methods=["GET"]),
]
