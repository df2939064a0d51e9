"""``sparkindex status [--json]``: the latest job of the aliases, and their last verify.

Without any job it says so in words (and ``"job_id": null`` with a ``message`` in JSON), exit 0:
a fresh pipeline is not an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape

from sparkindex.cli.render import err, out
from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.verify_runs import VerifyRuns
from sparkindex.documents.planning import selected_aliases
from sparkindex.jobs.control import latest_job


def _last_verify(store: CoordinationStore, aliases: Sequence[str]) -> dict[str, Any]:
    runs = VerifyRuns(store)
    found = {}
    for alias in aliases:
        r = runs.latest(alias)
        if r is not None:
            found[alias] = {k: v for k, v in r.to_dict().items() if k not in ("report", "alias")}
    return found


def status_body(pipeline: Pipeline, index: Sequence[str] | None, as_json: bool) -> dict[str, Any] | None:
    aliases = selected_aliases(pipeline, index)
    store = CoordinationStore(pipeline.coordination_url(), pipeline.coordination.prefix)
    try:
        job = latest_job(store, aliases)
        verified = _last_verify(store, aliases)
        if job is None:
            message = f"no reindex job has run for {', '.join(aliases)} yet; start one with `sparkindex reindex`"
            if as_json:
                return {"job_id": None, "status": None, "aliases": aliases, "message": message, "verify": verified}
            err.print(escape(message))
            return None
        stats = store.stats(job.id)
        body = {
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
    finally:
        store.close()
    if as_json:
        return body
    out.print(f"job {job.id}  [bold]{job.status}[/]  {escape(', '.join(job.aliases))}")
    for k, s in stats.items():
        out.print(
            f"  {escape(k)}: {s.processed:,}/{s.total:,} processed, {s.failed:,} failed, partitions {s.partitions}",
            highlight=False,
        )
    if job.error_message:
        out.print(f"  error: {escape(job.error_message)}")
    for alias, v in verified.items():
        out.print(
            f"  last verify of {escape(alias)}: {v['status']} (missing {v['missing']:,}, extra {v['extra']:,}, "
            f"stale {v['stale']:,}, duplicates {v['duplicates']:,})",
            highlight=False,
        )
    return None
