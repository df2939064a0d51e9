"""`sync` into OpenSearch and Elasticsearch: the same changes as the Tantivy tests, from PostgreSQL
logical decoding, applied through the engines' bulk API with ``external_gte`` versions and no
version ledger. The engines are osmem-server, a TEST DOUBLE (neither engine installs here); the
Elasticsearch flavour goes through the shim that speaks its dialect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.capture.consumer_offsets import open_consumer_offsets
from sparkindex.coordination.store import CoordinationStore
from sparkindex.targets.registry import open_target
from sparkindex.targets.search_engine.offsets import IndexOffsets, checkpoint_id
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop
from tests.capture.test_postgres_sync import exercise_changes
from tests.support.osmem import *  # noqa: F403 (the osmem, osmem_cluster and es_shim fixtures)
from tests.support.osmem import engine_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _engine_shop(
    request: pytest.FixtureRequest, directory: Path, services: dict[str, str], spark: Any, extra: str = ""
) -> Iterator[Shop]:
    url = engine_url(request.param, request, request.getfixturevalue("osmem_cluster"))
    shop = make_pg_shop(directory, services["postgres"], extra=extra, target=url)
    shop.reindex(spark)
    first = shop.sync(spark)  # creates the slot: changes from now on are captured
    assert (first.applied, first.deleted) == (0, 0)
    yield shop
    drop_pg_shop(shop, services["postgres"])


@pytest.fixture(params=["opensearch", "elasticsearch"])
def shop(request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    yield from _engine_shop(request, tmp_path / "shop", services, spark)


@pytest.fixture(params=["opensearch", "elasticsearch"])
def offsets_shop(
    request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], spark: Any
) -> Iterator[Shop]:
    """``sync.offsets: target``: the consumer offsets in the engine's offsets index."""
    yield from _engine_shop(request, tmp_path / "shop", services, spark, extra="  offsets: target\n")


def ledger_rows(shop: Shop) -> int:
    p = shop.pipeline
    store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
    try:
        table = store.t.doc_version
        with store.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
    finally:
        store.close()


def test_inserts_updates_deletes_and_fan_out_reach_the_engine(shop: Shop, spark: Any) -> None:
    exercise_changes(shop, spark)
    assert ledger_rows(shop) == 0, "the engine orders writes by external_gte itself: no ledger"


def _index_offsets(shop: Shop) -> IndexOffsets:
    p = shop.pipeline
    store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
    target = open_target(p.target.url, p.base_dir, p.target.options)
    offsets = open_consumer_offsets(p, store, lambda: target)
    store.close()
    assert isinstance(offsets, IndexOffsets)
    return offsets


def _store_offsets(shop: Shop) -> dict[str, Any]:
    p = shop.pipeline
    store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
    try:
        return dict(store.offsets.offsets("default"))
    finally:
        store.close()


def test_offsets_live_in_the_target_and_a_sync_resumes_from_them(offsets_shop: Shop, spark: Any) -> None:
    """``sync.offsets: target``: none in the coordination store, a sync resumes from the target's."""
    shop = offsets_shop
    shop.sql("UPDATE products SET name = :n WHERE id = 1", params={"n": HOSTILE[0]})
    summary = shop.sync(spark)
    assert (summary.applied, summary.deleted) == (1, 0)
    assert (shop.document("1") or {}).get("name") == HOSTILE[0]
    assert _store_offsets(shop) == {}, "sync.offsets: target keeps none in the coordination store"
    saved = _index_offsets(shop).offsets("default")["products"]
    assert saved.position == summary.position and saved.applied == 1
    # resumed from the target's checkpoint: only what came after it
    shop.sql("UPDATE products SET name = :n WHERE id = 2", params={"n": HOSTILE[1]})
    again = shop.sync(spark)
    assert (again.applied, again.deleted) == (1, 0)
    assert _index_offsets(shop).offsets("default")["products"].applied == 2
    assert shop.verify().clean


def test_a_sync_whose_checkpoint_was_lost_loses_no_change(offsets_shop: Shop, spark: Any) -> None:
    """On PostgreSQL the slot holds its confirmed position too; that the processed event itself
    is adopted is proven in test_consumer_offsets (for sources whose position is ours alone)."""
    shop = offsets_shop
    shop.sql("UPDATE products SET name = :n WHERE id = 3", params={"n": HOSTILE[2]})
    shop.sync(spark)
    offsets = _index_offsets(shop)
    # the crash between a batch's processed event and its checkpoint, the first time round
    offsets.api.call(
        "DELETE", f"/{offsets.index}/_doc/{checkpoint_id(offsets.namespace, 'default', 'products')}", "dropping"
    )
    offsets.api.call("POST", f"/{offsets.index}/_refresh", "refreshing")
    shop.sql("UPDATE products SET name = :n WHERE id = 4", params={"n": HOSTILE[3]})
    resumed = shop.sync(spark)
    # the commit after the lost checkpoint is applied, not skipped as "before now"
    assert resumed.applied == 1
    assert (shop.document("4") or {}).get("name") == HOSTILE[3]
    assert shop.verify().clean
