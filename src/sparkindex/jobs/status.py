"""The aliases' latest reindex job and their last verify, as ``status --json`` reports them.

Without any job the report says so in words (``"job_id": null`` and a ``message``): a fresh
pipeline is not an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.planning import selected_aliases
from sparkindex.jobs.control import latest_job
from sparkindex.resources import open_store


def _last_verify(store: CoordinationStore, aliases: Sequence[str]) -> dict[str, Any]:
    found = {}
    for alias in aliases:
        r = store.verify_runs.latest(alias)
        if r is not None:
            found[alias] = {k: v for k, v in r.to_dict().items() if k not in ("report", "alias")}
    return found


def status_report(pipeline: Pipeline, aliases: Sequence[str] | None = None) -> dict[str, Any]:
    chosen = selected_aliases(pipeline, aliases)
    with open_store(pipeline) as store:
        job = latest_job(store, chosen)
        verified = _last_verify(store, chosen)
        if job is None:
            message = f"no reindex job has run for {', '.join(chosen)} yet; start one with `sparkindex reindex`"
            return {"job_id": None, "status": None, "aliases": chosen, "message": message, "verify": verified}
        stats = store.partition_stats.stats(job.id)
        return {
            "job_id": job.id,
            "status": str(job.status),
            "aliases": list(job.aliases),
            "indexes": job.targets,
            "error": job.error_message,
            "created_at": job.created_at,
            "completed_at": job.completed_at,
            "entities": {k: s.to_dict() for k, s in stats.items()},
            "dead_letters": store.dead_letters.count(job.id),
            "verify": verified,
        }
