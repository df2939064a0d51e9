"""Change capture with ``type: join`` children (reviews as documents of their own, routed to their
product) from PostgreSQL into OpenSearch on osmem-server, a TEST DOUBLE, behind the recording
proxy: a deleted child's document is deleted, a moved child's old copy is deleted under its old
routing before the new parent's rebuild writes it again, and a truncated join table takes its
children with it. Each case ends with verify clean (parents and children)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import *  # noqa: F403 (the osmem, osmem_cluster and fault_proxy fixtures)
from tests.support.osmem import opensearch_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any, fault_proxy: HttpProxy) -> Iterator[Shop]:
    shop = make_pg_shop(
        tmp_path / "shop",
        services["postgres"],
        products=60,
        extra="  truncate_range_docs: 20\n",  # a truncate's rebuild over a dozen tasks, families cut
        target=opensearch_url(fault_proxy),
    )
    path = shop.directory / "pipeline.yaml"
    text = path.read_text(encoding="utf-8")
    joined = text.replace("name: reviews\n        type: nested", "name: review\n        type: join")
    joined = joined.replace("    complexity: 3.0\n", "    complexity: 3.0\n    settings: {number_of_shards: 3}\n")
    assert joined != text
    path.write_text(joined, encoding="utf-8")
    shop = dataclasses.replace(shop, pipeline=load_pipeline(path))
    shop.reindex(spark)
    first = shop.sync(spark)  # the slot: changes from here on are captured
    assert (first.applied, first.deleted) == (0, 0)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def _review(shop: Shop, nth: int) -> tuple[int, int]:
    """The *nth* review (by id) and its product."""
    review = int(shop.scalar(f"SELECT id FROM reviews ORDER BY id LIMIT 1 OFFSET {nth}"))
    return review, int(shop.scalar(f"SELECT product_id FROM reviews WHERE id = {review}"))


def _sent(proxy: HttpProxy, since: int) -> list[tuple[str, str, str | None]]:
    return [a for b in proxy.bulks[since:] for a in b.actions]


def test_a_deleted_child_row_deletes_its_document(shop: Shop, spark: Any, fault_proxy: HttpProxy) -> None:
    review, product = _review(shop, 5)
    assert shop.document(f"review:{review}") is not None
    shop.sql(f"DELETE FROM reviews WHERE id = {review}")
    summary = shop.sync(spark)
    assert summary.deleted >= 1
    assert shop.document(f"review:{review}") is None
    assert shop.document(str(product)) is not None, "the parent stays"
    report = shop.verify()
    assert report.clean, report.to_dict()


def test_a_moved_child_is_deleted_under_its_old_routing_then_written_under_the_new(
    shop: Shop, spark: Any, fault_proxy: HttpProxy
) -> None:
    review, product = _review(shop, 7)
    other = product % 60 + 1
    before = len(fault_proxy.bulks)
    shop.sql(f"UPDATE reviews SET product_id = {other}, body = :b WHERE id = {review}", params={"b": HOSTILE[4]})
    shop.sync(spark)
    sent = [a for a in _sent(fault_proxy, before) if a[1] == f"review:{review}"]
    assert sent == [("delete", f"review:{review}", str(product)), ("index", f"review:{review}", str(other))], sent
    moved = shop.document(f"review:{review}") or {}
    assert moved.get("join") == {"name": "review", "parent": str(other)}
    assert moved.get("review", {}).get("body") == HOSTILE[4]
    report = shop.verify()
    assert report.clean, report.to_dict()


def test_a_truncated_join_table_takes_its_children_and_leaves_the_parents(shop: Shop, spark: Any) -> None:
    review, product = _review(shop, 3)
    shop.sql("TRUNCATE reviews")
    shop.sync(spark)
    assert shop.document(f"review:{review}") is None
    assert shop.document(str(product)) is not None
    report = shop.verify()
    assert report.clean, report.to_dict()
    assert report.index_docs == int(shop.scalar("SELECT count(*) FROM products"))


def test_a_reload_truncate_and_reinsert_in_one_transaction_keeps_the_reinserted_children(
    shop: Shop, spark: Any
) -> None:
    """TRUNCATE then INSERT in one transaction: the deletes and the rewrites share its commit's
    position (one external version), spread over range tasks and insert tasks."""
    engine = sa.create_engine(normalize_url(shop.url))
    with engine.connect() as conn:
        kept = [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM reviews ORDER BY id LIMIT 15"))]
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE reviews"))
        conn.execute(sa.table("reviews", *(sa.column(c) for c in kept[0])).insert(), kept)
    engine.dispose()
    shop.sync(spark)
    for row in kept:
        child = shop.document(f"review:{row['id']}") or {}
        assert child.get("join") == {"name": "review", "parent": str(row["product_id"])}, row["id"]
    report = shop.verify()
    assert report.clean, report.to_dict()
    assert report.index_docs == int(shop.scalar("SELECT count(*) FROM products")) + len(kept)
