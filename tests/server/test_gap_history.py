"""The gap history the page reads (`si_sync_gap`), on every store kind: a gap is found open and
ends reconciled, refused or failed; a group keeps only its newest GAPS_KEPT gaps (a sync refused
at every start by a cron job must not grow the table forever); a reader that must not write
sees nothing before any sync created the table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.sync_events import GAPS_KEPT, SyncEvents, make_event_table, make_gap_table


@pytest.fixture
def engine(store_url: tuple[str, str]) -> Iterator[tuple[Engine, str]]:
    url, prefix = store_url
    engine = make_engine(url)
    yield engine, prefix
    make_gap_table(prefix).drop(engine, checkfirst=True)
    make_event_table(prefix)[1].drop(engine, checkfirst=True)
    engine.dispose()


def test_gaps_are_kept_per_group_newest_first_and_bounded(engine: tuple[Engine, str]) -> None:
    eng, prefix = engine
    assert SyncEvents(eng, prefix, create=False).gaps() == [], "nothing (and no table) before a sync"
    events = SyncEvents(eng, prefix)
    first = events.gap_found("g", "products", "binlog purged", 10, 42)
    for i in range(GAPS_KEPT + 4):
        events.gap_ended(events.gap_found("g", "products", f"gap {i}", i, None), "refused", detail=f"refused {i}")
    other = events.gap_found("h", "orders", "slot gone", None, None)
    events.gap_ended(other, "failed", detail="Spark lost its executors")

    kept = events.gaps("g", limit=GAPS_KEPT + 10)
    assert len(kept) == GAPS_KEPT and first not in {g.gap_id for g in kept}, "the oldest went"
    assert [g.reason for g in kept[:2]] == [f"gap {GAPS_KEPT + 3}", f"gap {GAPS_KEPT + 2}"]
    assert all(g.outcome == "refused" and g.ended_at is not None and g.ended_at >= g.found_at for g in kept)

    both = events.gaps(limit=1)
    assert [(g.group, g.outcome, g.detail) for g in both] == [
        ("g", "refused", f"refused {GAPS_KEPT + 3}"),
        ("h", "failed", "Spark lost its executors"),
    ]
    healed = events.gap_found("h", "orders", "slot gone", 7, None)
    events.gap_ended(healed, "reconciled", position=2**62, found={"missing": 3, "stale": 0})
    [newest] = events.gaps("h", limit=1)
    assert (newest.outcome, newest.position, newest.found, newest.stored) == (
        "reconciled",
        2**62,
        {"missing": 3, "stale": 0},
        7,
    )
