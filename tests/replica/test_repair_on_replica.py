"""Verify and repair read a replica that is behind a live sync: drift is asked of the primary.

The index is up to date with the PostgreSQL primary (as a sync keeps it) while the replica's
replay is paused before an insert, an update and a delete. Judged by the replica alone, the new
row's document is extra, the deleted row's missing and the updated row's stale, and repair would
delete, resurrect and revert them. Read with the primary beside it, verify reports what the
primary says (one document really missing) and repair fixes that one and touches nothing else.
In one process (no Spark): the range tasks are the ones Spark runs.

The module owns the replica of ``scripts/test-replicas.sh`` (port 55433) while it runs: it
pauses replay, and resumes it however the test ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.documents.planning import resolve_plans
from sparkindex.resources import open_source_url, open_store
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.repair import repair
from sparkindex.verify.verifier import Verifier, VerifyReport
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop, wait_until
from tests.jobs.planting import built_documents, index_without_spark, plant, tantivy
from tests.replica.helpers import assert_written, query, replica_url, start_replicas, write_during_rebuild

pytestmark = [pytest.mark.postgres]
REPLICA_PORT = 55433
PRODUCTS = 40
KINDS = ("missing", "extra", "stale", "duplicates")


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    start_replicas()
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=PRODUCTS)
    # the server's own database: the shop's may not have reached the replica yet
    server = sa.make_url(replica_url(shop.url, REPLICA_PORT)).set(database="postgres").render_as_string(False)
    query(server, "SELECT pg_wal_replay_resume()")  # a test that died paused may have left it so
    has = "SELECT count(*) FROM pg_database WHERE datname = :d"
    wait_until(lambda: query(server, has, {"d": sa.make_url(shop.url).database})[0][0] == 1, 60, "the shop replicated")
    try:
        yield shop
    finally:
        query(server, "SELECT pg_wal_replay_resume()")
        drop_pg_shop(shop, services["postgres"])


@contextlib.contextmanager
def verifier(shop: Shop, reads: str, primary: bool) -> Iterator[Verifier]:
    """A verifier whose ranges read *reads*; with *primary*, drift is asked of the shop's primary."""
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open_source_url(reads))
        first = stack.enter_context(open_source_url(shop.url)) if primary else None
        target = stack.enter_context(tantivy(shop.pipeline))
        plans = {a: p for a, (p, _) in resolve_plans(shop.pipeline, source, ["products"]).items()}
        store = stack.enter_context(open_store(shop.pipeline))
        runner = local_runner(LocalResources(source, target, plans, store, primary=first))
        yield Verifier(source, target, plans, runner, shop.pipeline.job)


def counts(report: VerifyReport) -> dict[str, int]:
    return {k: getattr(report, k) for k in KINDS}


def test_repair_over_a_replica_behind_a_live_sync_acts_on_what_the_primary_says(shop: Shop) -> None:
    replica = replica_url(shop.url, REPLICA_PORT)
    wait_until(
        lambda: (
            query(replica, "SELECT to_regclass('products') IS NOT NULL")[0][0]
            and query(replica, "SELECT count(*) FROM products")[0][0] == PRODUCTS
        ),
        60,
        "the replica to have the shop",
    )
    query(replica, "SELECT pg_wal_replay_pause()")
    expected = write_during_rebuild(shop)  # on the primary only: the replica is behind
    index = index_without_spark(shop.pipeline, "products")  # the index as a sync keeps it: the primary's
    plant(shop.pipeline, index, built_documents(shop.pipeline, "products"), missing="5")  # real drift
    expected["5"] = shop.scalar("SELECT name FROM products WHERE id = 5")
    assert query(replica, "SELECT count(*) FROM products WHERE id = 3")[0][0] == 1, "replay is paused"

    with verifier(shop, replica, primary=True) as v:
        [seen] = v.run()
    assert counts(seen) == {"missing": 1, "extra": 0, "stale": 0, "duplicates": 0}, seen
    assert seen.samples["missing"] == ["5"], seen.samples

    with verifier(shop, replica, primary=True) as v:
        result = repair(v, "replica-repair")
    [before], [after] = result.before, result.after
    assert counts(before) == {"missing": 1, "extra": 0, "stale": 0, "duplicates": 0}, before
    assert before.repaired == {"indexed": 1, "deleted": 0, "failed": 0}, before.repaired
    assert counts(after) == dict.fromkeys(KINDS, 0), after
    assert_written(shop, expected)  # the insert kept, the update not reverted, the delete not undone

    query(replica, "SELECT pg_wal_replay_resume()")
    assert shop.verify().clean  # the primary's own verify: the index is the primary's
