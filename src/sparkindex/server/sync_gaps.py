"""``GET /api/sync/gaps``: per consumer group, the gaps its syncs found in the change log and how
each ended (a gap is never skipped silently: reconciled, with what the verify/repair found; or
refused; or a reconciliation that failed and is tried again at the next start), beside the
group's error counters.

Both come from the coordination store, where every sync (and every reindex's catch-up) records
them (:mod:`sparkindex.coordination.sync_events`); they are read through the views' engine, which
takes no write lock, by a reader that never creates a table (none exists before a first sync).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from sparkindex.config.secrets import redact_url
from sparkindex.coordination.sync_events import GAPS_KEPT, GapRecord, SyncEvent, SyncEvents
from sparkindex.server.responses import ORJSONResponse, query_int
from sparkindex.server.state import ServerState

#: gaps per group a page shows (the API's default limit)
GAPS_SHOWN = 20


def _reader(state: ServerState) -> SyncEvents:
    """A reader over the views' engine, not the store's own ``store.sync_events``: on SQLite the
    store's engine opens every transaction with ``BEGIN IMMEDIATE`` (the write lock), so a page
    refresh would queue behind the workers' writes and they behind it (see
    :mod:`sparkindex.coordination.views`)."""
    return SyncEvents(state.views.engine, state.pipeline.coordination.prefix, create=False)


def gap_row(gap: GapRecord) -> dict[str, Any]:
    """One gap as JSON; free text passes the URL redaction once more (errors quote drivers)."""
    row = gap.to_dict()
    row["id"] = row.pop("gap_id")
    row["reason"] = redact_url(gap.reason)
    row["detail"] = None if gap.detail is None else redact_url(gap.detail)
    return row


def _group(name: str, gaps: list[GapRecord], events: Iterable[SyncEvent]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for gap in gaps:
        counts[gap.outcome] = counts.get(gap.outcome, 0) + 1
    return {
        "group": name,
        "counts": counts,
        "gaps": [gap_row(g) for g in gaps],
        "events": {
            e.kind: {"count": e.count, "last_at": e.last_at, "message": redact_url(e.message)}
            for e in sorted(events, key=lambda e: e.kind)
        },
    }


def gap_groups(state: ServerState, group: str | None = None, limit: int = GAPS_SHOWN) -> list[dict[str, Any]]:
    """Groups that met a gap, by name, each with its newest *limit* gaps (newest first) and its
    error counters. A group with errors but no gap is left out: ``/metrics`` counts those."""
    reader = _reader(state)
    by_group: dict[str, list[GapRecord]] = {}
    for gap in reader.gaps(group, limit=limit):
        by_group.setdefault(gap.group, []).append(gap)
    if not by_group:
        return []
    events: dict[str, list[SyncEvent]] = {}
    for event in reader.events(group):
        events.setdefault(event.group, []).append(event)
    return [_group(name, by_group[name], events.get(name, [])) for name in sorted(by_group)]


def sync_gaps(request: Request) -> ORJSONResponse:
    state: ServerState = request.app.state.server
    limit = query_int(request, "limit", GAPS_SHOWN, 1, GAPS_KEPT)
    return ORJSONResponse({"groups": gap_groups(state, request.query_params.get("group"), limit)})


ROUTES = [Route("/api/sync/gaps", sync_gaps)]
