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

from sparkindex.coordination.offsets import OffsetStore
from sparkindex.coordination.store import CoordinationStore
from tests.changes.helpers import Shop, drop_pg_shop, make_pg_shop
from tests.changes.test_postgres_sync import exercise_changes
from tests.support.osmem import *  # noqa: F403 (the osmem, osmem_cluster and es_shim fixtures)
from tests.support.osmem import OsmemCluster, elasticsearch_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(params=["opensearch", "elasticsearch"])
def shop(
    request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], spark: Any, osmem_cluster: OsmemCluster
) -> Iterator[Shop]:
    if request.param == "opensearch":
        url = osmem_cluster.opensearch_url
    else:
        url = elasticsearch_url(request.getfixturevalue("es_shim"))
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], target=url)
    shop.reindex(spark)
    first = shop.sync(spark)  # creates the slot: changes from now on are captured
    assert (first.applied, first.deleted) == (0, 0)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def ledger_rows(shop: Shop) -> int:
    p = shop.pipeline
    store = CoordinationStore(p.coordination_url(), p.coordination.prefix)
    try:
        table = OffsetStore(store.engine, p.coordination.prefix).t.doc_version
        with store.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
    finally:
        store.close()


def test_inserts_updates_deletes_and_fan_out_reach_the_engine(shop: Shop, spark: Any) -> None:
    exercise_changes(shop, spark)
    assert ledger_rows(shop) == 0, "the engine orders writes by external_gte itself: no ledger"
