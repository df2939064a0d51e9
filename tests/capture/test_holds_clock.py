"""Holds and presence are read on the store's clock, not the reader's (found by the chaos
campaign: a sync whose wall clock ran 90 s ahead saw every reindex hold as expired, never
paused, and the rebuild could not swap on any rerun).

The reader here is a real process whose wall clock is jumped with libfaketime
(:mod:`chaos.clock`), on the PostgreSQL store."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
from chaos.clock import run_python_jumped

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.holds import SyncHolds
from sparkindex.coordination.offsets import make_offset_tables
from tests.coordination.helpers import concept_on
from tests.e2e.shop import drop_database, fresh_database

pytestmark = pytest.mark.postgres

READER = """
import sys, orjson
from sparkindex.coordination.store import CoordinationStore
holds = CoordinationStore(sys.argv[1]).sync_holds
print(orjson.dumps({"holds": sorted(holds.holds(["products", "reviews"])),
                    "serving": sorted(holds.serving(["products"]))}).decode())
"""


@pytest.mark.parametrize("jump_s", [90.0, -90.0])
def test_a_reader_with_a_jumped_clock_sees_the_live_holds(
    tmp_path: Path, services: dict[str, str], jump_s: float
) -> None:
    name = f"holds_clock_{uuid.uuid4().hex[:8]}"  # its own database: parallel workers never share it
    url = fresh_database(services["postgres"], name)
    engine = make_engine(url)
    try:
        holds = concept_on(SyncHolds, engine, "")
        holds.hold("products", "reindex:j1:a", ttl_s=30.0)
        holds.hold("reviews", "reindex:j0:a", ttl_s=-5.0)  # expired already, by the store's clock
        holds.announce("default", ["products"], "sync:a", ttl_s=30.0)
        seen = orjson.loads(run_python_jumped(tmp_path / "clock", jump_s, READER, url))
        assert seen == {"holds": ["products"], "serving": ["products"]}
    finally:
        make_offset_tables("").metadata.drop_all(engine)
        engine.dispose()
        drop_database(services["postgres"], name)
