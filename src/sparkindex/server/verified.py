"""``GET /api/verify/aliases``: per alias, when it was last verified and what drift that found.

"Is my index right?" is answered per alias by the newest verify run anyone recorded (the CLI,
this server's button or schedule, a sync's schedule; :mod:`sparkindex.coordination.verify_runs`).
Every alias of the pipeline is listed, those never verified too (saying so is the answer), and
aliases of other pipelines that share the store after them. The drift counts come with the
run's bounded sample of document ids per kind, so a person can look at one of them.
"""

from __future__ import annotations

import decimal
import time
from typing import Any

import orjson
import sqlalchemy as sa
from starlette.requests import Request
from starlette.routing import Route

from sparkindex.config.secrets import redact_url
from sparkindex.coordination.verify_runs import verify_run_table
from sparkindex.server.responses import ORJSONResponse
from sparkindex.server.state import ServerState

DRIFT_KINDS = ("missing", "extra", "stale", "duplicates", "unbuildable")
#: sample ids shown per kind (a run keeps a bounded sample; the page needs a few)
SAMPLES_SHOWN = 10


def plain_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as JSON can carry them. The views reflect the table, so its keys are SQLAlchemy's
    ``quoted_name`` (a str subclass that orjson refuses without OPT_NON_STR_KEYS: the socket's
    send failed and dropped every client once a verify run existed), and MariaDB's reflected
    DOUBLE columns read back as Decimal."""
    return [{str(k): float(v) if isinstance(v, decimal.Decimal) else v for k, v in r.items()} for r in runs]


def _samples(state: ServerState, runs: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """The sample ids of each alias's newest run, from its recorded report."""
    if not runs:
        return {}
    t = verify_run_table(state.pipeline.coordination.prefix)
    wanted = sa.or_(*(sa.and_(t.c.run_id == r["run_id"], t.c.alias == r["alias"]) for r in runs))
    with state.views.engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.alias, t.c.report_json).where(wanted)).fetchall()
    out: dict[str, dict[str, list[str]]] = {}
    for alias, raw in rows:
        report = orjson.loads(raw) if raw else {}
        samples = report.get("samples") if isinstance(report, dict) else None
        if isinstance(samples, dict):
            out[alias] = {k: [str(i) for i in v[:SAMPLES_SHOWN]] for k, v in samples.items() if isinstance(v, list)}
    return out


def _row(alias: str, run: dict[str, Any] | None, samples: dict[str, list[str]], in_pipeline: bool) -> dict[str, Any]:
    if run is None:
        return {
            "alias": alias,
            "in_pipeline": in_pipeline,
            "verified": False,
            "status": "never",
            "finished_at": None,
            "age_s": None,
        }
    drift = {k: int(run.get(k) or 0) for k in DRIFT_KINDS}
    finished = run.get("finished_at")
    return {
        "alias": alias,
        "in_pipeline": in_pipeline,
        "verified": True,
        "status": str(run.get("status")),  # clean, drift, failed
        "run_id": run.get("run_id"),
        "index": run.get("index_name"),
        "trigger": run.get("trigger"),
        "repair": bool(run.get("repair")),
        "started_at": run.get("started_at"),
        "finished_at": finished,
        "age_s": None if finished is None else round(max(0.0, time.time() - float(finished)), 3),
        "checked": int(run.get("checked") or 0),
        "index_docs": int(run.get("index_docs") or 0),
        "drift": drift,
        "drift_total": sum(drift[k] for k in ("missing", "extra", "stale", "duplicates")),
        "samples": {k: samples.get(k, []) for k in DRIFT_KINDS},
        "error": None if run.get("error") is None else redact_url(str(run["error"])),
    }


def verified_aliases(state: ServerState, runs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per alias; *runs*: the views' newest run per alias, when the caller has them."""
    runs = plain_runs(state.views.verify_runs()) if runs is None else runs
    newest = {str(r["alias"]): r for r in runs}
    samples = _samples(state, runs)
    mine = state.aliases
    others = sorted(a for a in newest if a not in mine)
    return [_row(a, newest.get(a), samples.get(a, {}), a in mine) for a in [*mine, *others]]


def verify_aliases(request: Request) -> ORJSONResponse:
    state: ServerState = request.app.state.server
    return ORJSONResponse({"every_s": state.pipeline.verify.every, "aliases": verified_aliases(state)})


ROUTES = [Route("/api/verify/aliases", verify_aliases)]
