"""Holds are leases, syncs announce what they serve, and a reindex records its swaps: the store
side (:mod:`sparkindex.coordination.holds`) on every store kind, and the keeper that renews a
reindex's holds while it needs them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.capture.hold_keeper import HoldKeeper
from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.holds import LEGACY_HOLD_TTL_S, SyncHolds
from sparkindex.coordination.offsets import make_offset_tables
from sparkindex.errors import TransientError
from tests.capture.helpers import wait_until
from tests.coordination.helpers import concept_on


@pytest.fixture
def engine(store_url: tuple[str, str]) -> Iterator[tuple[Engine, str]]:
    url, prefix = store_url
    engine = make_engine(url)
    yield engine, prefix
    make_offset_tables(prefix).metadata.drop_all(engine)
    engine.dispose()


def test_a_hold_lives_only_while_it_is_renewed(engine: tuple[Engine, str]) -> None:
    sync_holds = concept_on(SyncHolds, *engine)
    sync_holds.hold("products", "reindex:j1:a", ttl_s=1.0)
    sync_holds.hold("reviews", "reindex:j1:a", ttl_s=1.0)
    held = sync_holds.holds(["products", "reviews", "users"])
    assert set(held) == {"products", "reviews"} and held["products"].expires_at is not None
    assert sync_holds.renew_holds(["products"], "reindex:j1:a", ttl_s=3.0) == {"products"}
    assert sync_holds.renew_holds(["products"], "reindex:other", ttl_s=3.0) == set()  # not the holder's
    wait_until(lambda: "reviews" not in sync_holds.holds(["reviews"]), 10, "the unrenewed hold to expire")
    assert set(sync_holds.holds(["products", "reviews"])) == {"products"}
    # an expired hold is not revived by its holder: a sync may have carried on meanwhile
    assert sync_holds.renew_holds(["reviews"], "reindex:j1:a") == set()
    sync_holds.release("products", "reindex:j1:a")
    assert sync_holds.holds(["products", "reviews"]) == {}


def test_holds_placed_before_the_lease_expire_after_the_legacy_ttl(engine: tuple[Engine, str]) -> None:
    """A store whose hold table predates ``expires_at`` gets the column; its old rows count as live
    for LEGACY_HOLD_TTL_S after they were placed, then as expired (nobody renews them)."""
    eng, prefix = engine
    hold = make_offset_tables(prefix).holds.hold
    before = sa.MetaData()
    old = sa.Table(hold.name, before, *[c._copy() for c in hold.columns if c.name != "expires_at"])
    before.create_all(eng)
    now = time.time()
    with eng.begin() as conn:
        conn.execute(old.insert().values(alias="fresh", holder="reindex:old", since=now - 60))
        conn.execute(old.insert().values(alias="stale", holder="reindex:dead", since=now - LEGACY_HOLD_TTL_S - 60))
    sync_holds = concept_on(SyncHolds, eng, prefix)
    held = sync_holds.holds(["fresh", "stale"])
    assert set(held) == {"fresh"} and held["fresh"].expires_at is None
    sync_holds.hold("stale", "reindex:new")  # a new hold replaces the dead one
    assert sync_holds.holds(["stale"])["stale"].holder == "reindex:new"


def test_syncs_announce_the_aliases_they_serve(engine: tuple[Engine, str]) -> None:
    sync_holds = concept_on(SyncHolds, *engine)
    sync_holds.announce("default", ["products"], "sync-a", ttl_s=30.0)  # sync --index products
    sync_holds.announce("default", ["products", "reviews"], "sync-b", ttl_s=30.0)
    sync_holds.announce("mirror", ["reviews"], "sync-c", ttl_s=1.0)
    assert {a: sorted(h) for a, h in sync_holds.serving(["products", "reviews"]).items()} == {
        "products": ["sync-a", "sync-b"],
        "reviews": ["sync-b", "sync-c"],
    }
    assert sync_holds.serving(["users"]) == {}
    # a renewal that names fewer aliases drops the others
    sync_holds.announce("default", ["reviews"], "sync-b", ttl_s=30.0)
    assert sync_holds.serving(["products"]) == {"products": ["sync-a"]}
    # a sync that stops retires; one that was killed expires
    sync_holds.retire("default", "sync-a")
    assert sync_holds.serving(["products"]) == {}
    wait_until(lambda: sync_holds.serving(["reviews"]) == {"reviews": ["sync-b"]}, 10, "sync-c to expire")
    # a pause is recorded for the sync that paused, against the hold it answered
    sync_holds.hold("reviews", "reindex:j2:x")
    sync_holds.pause("reviews", "reindex:j2:x", 42, "sync-b")
    [row] = sync_holds.presence(["reviews"])
    assert (row.holder, row.paused_for, row.paused_at) == ("sync-b", "reindex:j2:x", 42)
    assert sync_holds.holds(["reviews"])["reviews"].paused_by == "sync-b"
    # a sync that paused, then announces afresh (its row expired while it waited), stays paused
    sync_holds.retire("default", "sync-b")
    sync_holds.announce("default", ["reviews"], "sync-b", ttl_s=30.0)
    [row] = sync_holds.presence(["reviews"])
    assert (row.paused_for, row.paused_at) == ("reindex:j2:x", 42)


def test_a_reindex_records_its_start_and_its_swaps(engine: tuple[Engine, str]) -> None:
    sync_holds = concept_on(SyncHolds, *engine)
    sync_holds.record_starts(
        "job1", {"products": (7, {"lsn": 7}, "products_v2"), "reviews": (7, {"lsn": 7}, "reviews_v2")}
    )
    assert sync_holds.starts("job1") == {"products": (7, {"lsn": 7}), "reviews": (7, {"lsn": 7})}
    assert sync_holds.swaps("job1") == {}
    sync_holds.record_swap("job1", "products", "products_v2", 3)
    sync_holds.record_swap("job2", "users", "users_v5", None)  # a job without a recorded start
    assert sync_holds.swaps("job1") == {"products": "products_v2"}
    assert sync_holds.swaps("job2") == {"users": "users_v5"}
    sync_holds.forget_handover("job1")
    assert sync_holds.starts("job1") == {} and sync_holds.swaps("job1") == {}
    assert sync_holds.swaps("job2") == {"users": "users_v5"}


def test_the_keeper_renews_holds_until_released(engine: tuple[Engine, str]) -> None:
    sync_holds = concept_on(SyncHolds, *engine)
    keeper = HoldKeeper(sync_holds, ["products", "reviews"], "reindex:j3:k", ttl_s=1.0, every_s=0.1)
    keeper.start()
    try:
        time.sleep(2.5)  # two and a half leases: only renewals keep the holds
        assert set(sync_holds.holds(["products", "reviews"])) == {"products", "reviews"}
        keeper.check()
        assert keeper.lost is None
    finally:
        keeper.release()
    assert sync_holds.holds(["products", "reviews"]) == {}
    # a hold taken by someone else (a rerun of the job after this driver was presumed dead) is lost
    other = HoldKeeper(sync_holds, ["products"], "reindex:j3:k2", ttl_s=30.0, every_s=10.0)
    other.start()
    try:
        sync_holds.hold("products", "reindex:j3:k3")
        with pytest.raises(TransientError, match="expired or was replaced"):
            other.check()
    finally:
        other.release()
    assert sync_holds.holds(["products"])["products"].holder == "reindex:j3:k3"  # not ours to release
