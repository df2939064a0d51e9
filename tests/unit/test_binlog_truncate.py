"""Which table a binlog TRUNCATE statement empties (MariaDB logs it as a statement even in row
format): quoting, a database prefix, and statements that only look alike."""

from __future__ import annotations

import pytest

from sparkindex.sources.mysql.statements import truncated_table


@pytest.mark.parametrize(
    ("query", "default_db", "expected"),
    [
        ("TRUNCATE TABLE reviews", b"shop", "reviews"),
        ("truncate reviews;", "shop", "reviews"),
        ("  TRUNCATE  TABLE `shop` . `odd``name`  ", b"other", "odd`name"),
        ("TRUNCATE TABLE shop.reviews", None, "reviews"),
        ("TRUNCATE TABLE other.reviews", b"shop", None),  # another database's table of that name
        ("TRUNCATE TABLE reviews", b"other", None),
        ("DROP TABLE reviews", b"shop", None),
        ("INSERT INTO t VALUES ('truncate reviews')", b"shop", None),
        ("TRUNCATE TABLE reviews, products", b"shop", None),  # not MariaDB syntax: never guessed
        ("/* from an ORM */ TRUNCATE TABLE reviews", b"shop", "reviews"),
        ("-- note\n# another\n truncate table reviews wait 5", b"shop", "reviews"),
        ("TRUNCATE TABLE reviews NOWAIT", b"Shop", "reviews"),  # database names compared without case
    ],
)
def test_truncated_table(query: str, default_db: bytes | str | None, expected: str | None) -> None:
    assert truncated_table(query, "shop", default_db) == expected
