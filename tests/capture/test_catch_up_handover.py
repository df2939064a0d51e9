"""The reindex's hand-over to live syncs on PostgreSQL: a failure after the swap leaves no hold
and a rerun finishes the hand-over; the offset handed to a live group is one its slot serves;
a reindex waits for exactly the syncs that serve an alias it holds."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.capture import catch_up
from sparkindex.capture.catch_up import CatchUp, catch_up_consumer, catch_up_group
from sparkindex.capture.fanout import FanOut
from sparkindex.capture.session import resolve_consumer_plan, watched_tables
from sparkindex.capture.sync import run as runner
from sparkindex.config import load_pipeline
from sparkindex.coordination.holds import SyncHolds
from sparkindex.coordination.offsets import ConsumerOffsetRows
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import TransientError
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.sources.postgres.changes import PostgresChangeSource
from sparkindex.sources.postgres.slots import slot_name
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REVIEWS_INDEX = """\
  - alias: reviews
    table: reviews
    partition_size: 200
    relations:
      - {name: author, type: object, table: users}
"""


@pytest.fixture
def bare_shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    """Products and reviews, never indexed."""
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=300)
    text = (shop.directory / "pipeline.yaml").read_text(encoding="utf-8")
    (shop.directory / "pipeline.yaml").write_text(text.replace("job:\n", REVIEWS_INDEX + "job:\n", 1), "utf-8")
    shop.pipeline = load_pipeline(shop.directory / "pipeline.yaml")
    yield shop
    drop_pg_shop(shop, services["postgres"])


@pytest.fixture
def shop(bare_shop: Shop, spark: Any) -> Shop:
    bare_shop.reindex(spark)  # v1 of both aliases; its catch-up hands them to the default group
    return bare_shop


def _store(shop: Shop) -> CoordinationStore:
    return CoordinationStore(shop.pipeline.coordination_url())


def _alias(shop: Shop, alias: str) -> str | None:
    target = open_target(shop.pipeline.target.url, shop.pipeline.base_dir, shop.pipeline.target.options)
    try:
        return target.alias_target(alias)
    finally:
        target.close()


def _live_source(shop: Shop, consumer: str) -> PostgresChangeSource:
    source = open_source(shop.pipeline.source_url())
    aliases = [idx.alias for idx in shop.pipeline.indexes]
    fanouts = [FanOut(resolve_consumer_plan(shop.pipeline, source, a), source) for a in aliases]
    return PostgresChangeSource(shop.pipeline, source, watched_tables(fanouts), consumer)


def _assert_served(shop: Shop, offsets: ConsumerOffsetRows, group: str = "default") -> None:
    """The live group's slot serves every offset stored for it (no gap for its next start)."""
    changes = _live_source(shop, group)
    try:
        changes.prepare()
        for alias, stored in offsets.offsets(group).items():
            assert changes.continuity(stored.offset) is None, (alias, stored)
    finally:
        changes.close()


def _slots(shop: Shop) -> set[str]:
    with shop.engine().connect() as conn:
        return {r for (r,) in conn.execute(sa.text("SELECT slot_name FROM pg_replication_slots"))}


@pytest.mark.parametrize("runner_stores_the_head", [True, False], ids=["head-stored", "last-change-only"])
def test_the_offset_handed_to_a_live_group_is_one_its_slot_serves(
    bare_shop: Shop, spark: Any, monkeypatch: pytest.MonkeyPatch, runner_stores_the_head: bool
) -> None:
    """The first reindex makes the default group's slot just before its last round, which finds
    nothing to apply on a quiet database: the position handed over must still not be below that
    slot. Whether or not a caught-up round stores the head it reached (the runner does on
    PostgreSQL), the catch-up makes sure of it."""
    shop = bare_shop
    if not runner_stores_the_head:
        monkeypatch.setattr(PostgresChangeSource, "head_is_resumable", False)
    shop.reindex(spark)
    store = _store(shop)
    try:
        _assert_served(shop, store.offsets)
        shop.sql("UPDATE products SET name = :n WHERE id = 1", params={"n": HOSTILE[2]})
        shop.sync(spark)
        shop.reindex(spark)  # a quiet database again, a group that has synced
        _assert_served(shop, store.offsets)
        assert {o.index for o in store.offsets.offsets("default").values()} == {
            _alias(shop, "products"),
            _alias(shop, "reviews"),
        }
        assert shop.sync(spark).reconciled == {}  # no gap: nothing to reconcile
        assert shop.verify().clean
    finally:
        store.close()


def test_a_failure_after_the_swap_leaves_no_hold_and_a_rerun_hands_over(
    shop: Shop, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(shop)
    before = _alias(shop, "products")
    original = CatchUp._live_groups

    def fail_once_swapped(self: CatchUp, *args: Any, **kwargs: Any) -> set[str]:
        if _alias(shop, "products") != before:
            raise RuntimeError("injected failure after the swap")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CatchUp, "_live_groups", fail_once_swapped)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            ReindexJob(shop.pipeline, None, new=True, spark_factory=lambda: spark).run()
        [job] = [j for j in store.job_rows.jobs(["products", "reviews"]) if j.status == "FAILED"]
        assert _alias(shop, "products") == job.targets["products"]  # swapped...
        assert store.sync_holds.holds(["products", "reviews"]) == {}  # ...and nothing left paused
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(store.sync_holds.h.hold)).scalar() == 0
        assert set(store.sync_holds.swaps(job.id)) <= {"products", "reviews"} and store.sync_holds.swaps(job.id)
        monkeypatch.undo()

        summary = ReindexJob(shop.pipeline, None, spark_factory=lambda: spark).run()
        assert (summary.job_id, summary.status) == (job.id, "COMPLETED")
        assert {a: _alias(shop, a) for a in job.targets} == job.targets
        handed = store.offsets.offsets("default")
        assert {a: o.index for a, o in handed.items()} == job.targets
        assert store.offsets.offsets(catch_up_group(job.id)) == {} and store.sync_holds.swaps(job.id) == {}
        database = str(sa.make_url(shop.url).database)
        consumer = catch_up_consumer(sorted(job.targets))
        assert slot_name(shop.slot, database, shop.pipeline.slot_namespace(), consumer) not in _slots(shop)
        _assert_served(shop, store.offsets)
        shop.sql("UPDATE products SET name = :n WHERE id = 2", params={"n": HOSTILE[0]})
        shop.sync(spark)
        assert (shop.document("2") or {}).get("name") == HOSTILE[0]
        assert shop.verify().clean
    finally:
        store.close()


class PausingSync(threading.Thread):
    """What a running sync does with a hold on an alias it serves: pause it (the runner's side,
    driven here through the same store calls, so that the reindex's side is tested on its own)."""

    def __init__(self, holds: SyncHolds, aliases: list[str], holder: str) -> None:
        super().__init__(daemon=True)
        self.holds, self.aliases, self.holder = holds, aliases, holder
        self.paused: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            for alias, hold in self.holds.holds(self.aliases).items():
                if hold.paused_by != self.holder:
                    self.holds.pause(alias, hold.holder, 0, self.holder)
                    self.paused.append(alias)


def test_a_reindex_waits_only_for_the_syncs_serving_its_aliases(
    shop: Shop, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync of the default group serves products only (``sync --index products``): a reindex
    of reviews does not wait for it; a reindex of products does, until it paused."""
    store = _store(shop)
    key = runner.sync_lock_key(shop.pipeline.sync.group, runner.source_key(shop.pipeline))
    token = store.locks.acquire(key, "sync-of-products", 600)  # the group's sync runs...
    store.sync_holds.announce(shop.pipeline.sync.group, ["products"], "sync-of-products", 600)  # ...for products only
    try:
        started = time.monotonic()
        summary = ReindexJob(shop.pipeline, ["reviews"], new=True, spark_factory=lambda: spark).run()
        assert summary.status == "COMPLETED"
        assert time.monotonic() - started < catch_up.PAUSE_TIMEOUT_S

        # products is served: the reindex waits for its pause, and fails (holds released) without it
        monkeypatch.setattr(catch_up, "PAUSE_TIMEOUT_S", 3.0)
        with pytest.raises(TransientError, match="sync-of-products"):
            ReindexJob(shop.pipeline, ["products"], new=True, spark_factory=lambda: spark).run()
        assert store.sync_holds.holds(["products"]) == {}
        sync = PausingSync(store.sync_holds, ["products"], "sync-of-products")
        sync.start()
        try:
            monkeypatch.setattr(catch_up, "PAUSE_TIMEOUT_S", 120.0)
            summary = ReindexJob(shop.pipeline, ["products"], spark_factory=lambda: spark).run()  # resumes
            assert summary.status == "COMPLETED"
            assert sync.paused == ["products"]
        finally:
            sync.stop.set()
            sync.join(timeout=10)
    finally:
        store.sync_holds.retire(shop.pipeline.sync.group, "sync-of-products")
        store.locks.release(key, token)
        store.close()
    assert shop.verify().clean


@pytest.mark.skipif(
    "announce" not in Path(runner.__file__).read_text(encoding="utf-8"),
    reason="the runner does not announce the aliases it serves yet (SyncHolds.announce)",
)
def test_a_running_sync_of_one_alias_does_not_hold_up_a_reindex_of_another(shop: Shop, spark: Any, cli: Path) -> None:
    from tests.cli_process import LoggedProcess

    store = _store(shop)
    sync = LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--index", "products"],
        shop.directory / "logs",
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: sync.assert_running("sync") and bool(store.sync_holds.serving(["products"])), 300, "the sync"
        )
        started = time.monotonic()
        summary = ReindexJob(shop.pipeline, ["reviews"], new=True, spark_factory=lambda: spark).run()
        assert summary.status == "COMPLETED"
        assert time.monotonic() - started < catch_up.PAUSE_TIMEOUT_S
        summary = ReindexJob(shop.pipeline, ["products"], new=True, spark_factory=lambda: spark).run()
        assert summary.status == "COMPLETED"  # this one the sync paused for
        shop.sql("UPDATE products SET name = :n WHERE id = 3", params={"n": HOSTILE[3]})
        wait_until(
            lambda: sync.assert_running("sync") and (shop.document("3") or {}).get("name") == HOSTILE[3],
            120,
            "the sync to continue on the new version",
        )
    finally:
        sync.kill_group()
        store.close()


def test_a_live_sync_stops_when_a_reindex_hands_it_a_version_of_another_plan(shop: Shop, spark: Any, cli: Path) -> None:
    """The schema changes while a sync runs, and a reindex rebuilds the alias on the new schema.
    The sync, still on the plan it started with, would write documents of the old shape into the
    new version; it stops instead (exit 3, naming the alias), and a restart follows the new plan."""
    from tests.cli_process import LoggedProcess

    store = _store(shop)
    sync = LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--index", "products"],
        shop.directory / "logs",
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: sync.assert_running("sync") and bool(store.sync_holds.serving(["products"])), 300, "the sync"
        )
        shop.sql("ALTER TABLE products ADD COLUMN late_column text DEFAULT 'added while syncing'")
        summary = ReindexJob(shop.pipeline, ["products"], new=True, spark_factory=lambda: spark).run()
        assert summary.status == "COMPLETED"
        assert (shop.document("3") or {}).get("late_column") == "added while syncing"
        try:
            code: int | None = sync.wait(120)
        except subprocess.TimeoutExpired:
            code = None  # still running: on the old plan
        assert code == 3, f"the sync went on with its old plan (exit {code})"
        assert "products" in sync.stderr_text() and "another plan" in sync.stderr_text()
        assert "Traceback" not in sync.stderr_text()
    finally:
        sync.kill_group()
        store.close()
