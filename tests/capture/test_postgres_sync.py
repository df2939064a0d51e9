"""`sync` from PostgreSQL logical decoding (wal2json) into Tantivy, on real Spark Structured
Streaming: inserts, updates and deletes on root, nested and object tables, fan-out through two
levels, a delete found only through REPLICA IDENTITY FULL, an update that omits a TOASTed column,
and the clear errors."""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.errors import ConfigError
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"])
    shop.reindex(spark)
    first = shop.sync(spark)  # creates the slot: changes from now on are captured
    assert (first.applied, first.deleted) == (0, 0)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def test_inserts_updates_deletes_and_fan_out_reach_the_index(shop: Shop, spark: Any) -> None:
    exercise_changes(shop, spark)


def exercise_changes(shop: Shop, spark: Any) -> None:
    """Inserts, updates and deletes on root, nested and object tables, two-level fan-out."""
    author = shop.scalar("SELECT author_id FROM reviews WHERE product_id = 5 ORDER BY id LIMIT 1")
    category = shop.scalar("SELECT category_id FROM products WHERE id = 7")
    products_of_author = {
        r
        for (r,) in shop.engine()
        .connect()
        .exec_driver_sql(f"SELECT DISTINCT product_id FROM reviews WHERE author_id = {author}")
    }
    review = shop.scalar("SELECT id FROM reviews WHERE product_id = 9 ORDER BY id LIMIT 1")
    moved = shop.scalar("SELECT id FROM reviews WHERE product_id = 11 ORDER BY id LIMIT 1")
    shop.sql(
        # root: insert (hostile text), update, delete (its reviews first)
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
        "VALUES (100001, :n, :d, 1.5, 3, 1, '2026-01-01 00:00:00')",
        "UPDATE products SET name = :n2 WHERE id = 3",
        "DELETE FROM reviews WHERE product_id = 4",
        "DELETE FROM products WHERE id = 4",
        # object, two levels down: the author of reviews of several products
        f"UPDATE users SET name = :author WHERE id = {author}",
        # object, one level: a category rename reaches all its products
        f"UPDATE categories SET name = :cat WHERE id = {category}",
        # nested: a delete (needs the FULL identity to reveal product_id) and a move between products
        f"DELETE FROM reviews WHERE id = {review}",
        f"UPDATE reviews SET product_id = 12 WHERE id = {moved}",
        params={"n": HOSTILE[0], "d": HOSTILE[1], "n2": HOSTILE[2], "author": HOSTILE[3], "cat": HOSTILE[4]},
    )
    summary = shop.sync(spark)
    assert summary.deleted == 1
    assert summary.applied >= 3 + len(products_of_author)
    assert summary.position > 0 and summary.lag_s >= 0
    report = shop.verify()
    assert report.clean, report.to_dict()
    assert shop.document("4") is None
    assert shop.document("100001")["name"] == HOSTILE[0]  # type: ignore[index]
    assert shop.document("3")["name"] == HOSTILE[2]  # type: ignore[index]
    assert shop.document("7")["category"]["name"] == HOSTILE[4]  # type: ignore[index]
    for product in products_of_author - {4}:
        authors = [r["author"]["name"] for r in shop.document(str(product))["reviews"]]  # type: ignore[index]
        assert HOSTILE[3] in authors
    assert review not in [r["id"] for r in shop.document("9")["reviews"]]  # type: ignore[index]
    assert moved not in [r["id"] for r in shop.document("11")["reviews"]]  # type: ignore[index]
    assert moved in [r["id"] for r in shop.document("12")["reviews"]]  # type: ignore[index]


def test_a_second_run_applies_nothing_twice_and_keeps_its_position(shop: Shop, spark: Any) -> None:
    shop.sql("UPDATE products SET stock = stock + 1 WHERE id <= 20")
    first = shop.sync(spark)
    assert first.applied == 20
    again = shop.sync(spark)
    assert (again.applied, again.deleted) == (0, 0)
    # a bounded run stores the head it caught up to: WAL written since (a checkpoint, another
    # database's commits) moves it on, never back
    assert again.position >= first.position


def test_delete_needs_replica_identity_full_names_the_table(shop: Shop, spark: Any) -> None:
    shop.sql("ALTER TABLE reviews REPLICA IDENTITY DEFAULT")
    with pytest.raises(ConfigError) as info:
        shop.sync(spark)
    message = str(info.value)
    assert "'reviews'" in message and "product_id" in message and "REPLICA IDENTITY FULL" in message


def test_table_without_key_or_identity_is_refused(shop: Shop, spark: Any) -> None:
    shop.sql("ALTER TABLE users REPLICA IDENTITY NOTHING")
    with pytest.raises(ConfigError) as info:
        shop.sync(spark)
    assert "'users'" in str(info.value) and "no primary key or replica identity" in str(info.value)


def test_an_update_that_omits_an_unchanged_toasted_column_keeps_it_in_the_document(shop: Shop, spark: Any) -> None:
    """PostgreSQL leaves an unchanged TOASTed value out of an UPDATE's log record; a sync that
    indexed the values the log carries would lose the description. The change only says which
    row changed: the document is rebuilt from the current row."""
    rng = random.Random(7)
    big = "".join(rng.choice(string.ascii_letters + string.digits + " ") for _ in range(40_000))
    shop.sql("UPDATE products SET description = :d WHERE id = 6", params={"d": big})
    shop.sync(spark)
    assert shop.scalar("SELECT pg_column_size(description) FROM products WHERE id = 6") > 8_000  # stored out of line
    shop.sql(  # flushed at commit (the test server commits asynchronously): the peek below sees it
        "SET synchronous_commit = on",
        "UPDATE products SET name = :n WHERE id = 6",
        params={"n": HOSTILE[1]},
    )
    # the premise: the log's image of the update lacks the (unchanged, TOASTed) description
    slot = shop.scalar(f"SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE '{shop.slot}%'")
    with shop.engine().connect() as conn:
        peeked = conn.exec_driver_sql(
            f"SELECT data FROM pg_logical_slot_peek_changes('{slot}', NULL, NULL, "
            "'format-version', '2', 'add-tables', 'public.products')"
        ).fetchall()
    [record] = [m for m in (orjson.loads(d) for (d,) in peeked) if m.get("action") == "U"]
    assert "description" not in {c["name"] for c in record["columns"]}
    summary = shop.sync(spark)
    assert summary.applied == 1
    stored = shop.document("6")
    assert stored is not None and stored["name"] == HOSTILE[1] and stored["description"] == big
    assert shop.verify().clean
