"""Holds are leases, syncs announce what they serve, and a reindex records its swaps: the store
side (:mod:`sparkindex.coordination.holds`) on every store kind, and the keeper that renews a
reindex's holds while it needs them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.holds import LEGACY_HOLD_TTL_S
from sparkindex.coordination.offsets import OffsetStore, make_offset_tables
from sparkindex.errors import TransientError
from sparkindex.jobs.hold_keeper import HoldKeeper
from tests.changes.helpers import wait_until


@pytest.fixture
def engine(store_url: tuple[str, str]) -> Iterator[tuple[Engine, str]]:
    url, prefix = store_url
    engine = make_engine(url)
    yield engine, prefix
    make_offset_tables(prefix).metadata.drop_all(engine)
    engine.dispose()


def test_a_hold_lives_only_while_it_is_renewed(engine: tuple[Engine, str]) -> None:
    offsets = OffsetStore(*engine)
    offsets.hold("products", "reindex:j1:a", ttl_s=1.0)
    offsets.hold("reviews", "reindex:j1:a", ttl_s=1.0)
    held = offsets.holds(["products", "reviews", "users"])
    assert set(held) == {"products", "reviews"} and held["products"].expires_at is not None
    assert offsets.renew_holds(["products"], "reindex:j1:a", ttl_s=3.0) == {"products"}
    assert offsets.renew_holds(["products"], "reindex:other", ttl_s=3.0) == set()  # not the holder's
    wait_until(lambda: "reviews" not in offsets.holds(["reviews"]), 10, "the unrenewed hold to expire")
    assert set(offsets.holds(["products", "reviews"])) == {"products"}
    # an expired hold is not revived by its holder: a sync may have carried on meanwhile
    assert offsets.renew_holds(["reviews"], "reindex:j1:a") == set()
    offsets.release("products", "reindex:j1:a")
    assert offsets.holds(["products", "reviews"]) == {}


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
    offsets = OffsetStore(eng, prefix)
    held = offsets.holds(["fresh", "stale"])
    assert set(held) == {"fresh"} and held["fresh"].expires_at is None
    offsets.hold("stale", "reindex:new")  # a new hold replaces the dead one
    assert offsets.holds(["stale"])["stale"].holder == "reindex:new"


def test_syncs_announce_the_aliases_they_serve(engine: tuple[Engine, str]) -> None:
    offsets = OffsetStore(*engine)
    offsets.announce("default", ["products"], "sync-a", ttl_s=30.0)  # sync --index products
    offsets.announce("default", ["products", "reviews"], "sync-b", ttl_s=30.0)
    offsets.announce("mirror", ["reviews"], "sync-c", ttl_s=1.0)
    assert {a: sorted(h) for a, h in offsets.serving(["products", "reviews"]).items()} == {
        "products": ["sync-a", "sync-b"],
        "reviews": ["sync-b", "sync-c"],
    }
    assert offsets.serving(["users"]) == {}
    # a renewal that names fewer aliases drops the others
    offsets.announce("default", ["reviews"], "sync-b", ttl_s=30.0)
    assert offsets.serving(["products"]) == {"products": ["sync-a"]}
    # a sync that stops retires; one that was killed expires
    offsets.retire("default", "sync-a")
    assert offsets.serving(["products"]) == {}
    wait_until(lambda: offsets.serving(["reviews"]) == {"reviews": ["sync-b"]}, 10, "sync-c to expire")
    # a pause is recorded for the sync that paused, against the hold it answered
    offsets.hold("reviews", "reindex:j2:x")
    offsets.pause("reviews", "reindex:j2:x", 42, "sync-b")
    [row] = offsets.presence(["reviews"])
    assert (row.holder, row.paused_for, row.paused_at) == ("sync-b", "reindex:j2:x", 42)
    assert offsets.holds(["reviews"])["reviews"].paused_by == "sync-b"
    # a sync that paused, then announces afresh (its row expired while it waited), stays paused
    offsets.retire("default", "sync-b")
    offsets.announce("default", ["reviews"], "sync-b", ttl_s=30.0)
    [row] = offsets.presence(["reviews"])
    assert (row.paused_for, row.paused_at) == ("reindex:j2:x", 42)


def test_a_reindex_records_its_start_and_its_swaps(engine: tuple[Engine, str]) -> None:
    offsets = OffsetStore(*engine)
    offsets.record_starts(
        "job1", {"products": (7, {"lsn": 7}, "products_v2"), "reviews": (7, {"lsn": 7}, "reviews_v2")}
    )
    assert offsets.starts("job1") == {"products": (7, {"lsn": 7}), "reviews": (7, {"lsn": 7})}
    assert offsets.swaps("job1") == {}
    offsets.record_swap("job1", "products", "products_v2", 3)
    offsets.record_swap("job2", "users", "users_v5", None)  # a job without a recorded start
    assert offsets.swaps("job1") == {"products": "products_v2"}
    assert offsets.swaps("job2") == {"users": "users_v5"}
    offsets.forget_handover("job1")
    assert offsets.starts("job1") == {} and offsets.swaps("job1") == {}
    assert offsets.swaps("job2") == {"users": "users_v5"}


def test_the_keeper_renews_holds_until_released(engine: tuple[Engine, str]) -> None:
    offsets = OffsetStore(*engine)
    keeper = HoldKeeper(offsets, ["products", "reviews"], "reindex:j3:k", ttl_s=1.0, every_s=0.1)
    keeper.start()
    try:
        time.sleep(2.5)  # two and a half leases: only renewals keep the holds
        assert set(offsets.holds(["products", "reviews"])) == {"products", "reviews"}
        keeper.check()
        assert keeper.lost is None
    finally:
        keeper.release()
    assert offsets.holds(["products", "reviews"]) == {}
    # a hold taken by someone else (a rerun of the job after this driver was presumed dead) is lost
    other = HoldKeeper(offsets, ["products"], "reindex:j3:k2", ttl_s=30.0, every_s=10.0)
    other.start()
    try:
        offsets.hold("products", "reindex:j3:k3")
        with pytest.raises(TransientError, match="expired or was replaced"):
            other.check()
    finally:
        other.release()
    assert offsets.holds(["products"])["products"].holder == "reindex:j3:k3"  # not ours to release
