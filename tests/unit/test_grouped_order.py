"""When the builder may fetch a relation's rows grouped by their remote key.

``ORDER BY remote_key, order_by`` lets an index on the remote key hand rows over without a sort
of the whole page, and gives every parent the same rows in the same order as ``ORDER BY
order_by`` only where that order is total and the key's equality is Python's. Each case below is
one the builder must leave on the relation's own order; the documents are checked too, on a
real SQLite file, so a wrong choice shows as a wrong array, not only as a wrong list of names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.sqlite_files import sqlite_source

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.documents import DocumentBuilder, resolve_index
from sparkindex.documents.fetch_order import grouped_order
from sparkindex.sources.base import KeyRange, Source

SCHEMA = """
CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT);
CREATE TABLE comments (
  id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL REFERENCES posts(id), position INTEGER,
  slug TEXT NOT NULL UNIQUE, maybe TEXT UNIQUE, at_time TIME, body TEXT);
INSERT INTO posts VALUES (1, 'a'), (2, 'b');
-- ids run against position and slug, and the two posts' rows interleave
INSERT INTO comments VALUES
  (1, 2, 3, 'c', NULL, '10:00', 'x'), (2, 1, 2, 'b', 'm2', '10:00', 'y'), (3, 2, 1, 'a', 'm1', '11:00', 'z'),
  (4, 1, 1, 'd', NULL, '09:00', 'w');
"""


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    src = sqlite_source(tmp_path / "order.db", SCHEMA)
    yield src
    src.close()


def comments(source: Source, **relation: object) -> tuple[list[str], dict[str, list[int]]]:
    rel = RelationConfig(name="comments", type="nested", table="comments", columns=["id"], **relation)  # type: ignore[arg-type]
    plan = resolve_index(source, IndexConfig(alias="posts", table="posts", relations=[rel]), "indexes[0]")
    page = DocumentBuilder(source, plan).page(KeyRange(None, None), None, 10)
    return grouped_order(plan.embedded[0]), {d.id: [c["id"] for c in (d.fields or {})["comments"]] for d in page.docs}


@pytest.mark.parametrize(
    ("order_by", "grouped", "expected"),
    [
        (None, ["post_id", "id"], {"1": [2, 4], "2": [1, 3]}),  # the primary key, by default
        (["slug"], ["post_id", "slug"], {"1": [2, 4], "2": [3, 1]}),  # unique and NOT NULL
        (["position", "id"], ["post_id", "position", "id"], {"1": [4, 2], "2": [3, 1]}),  # covers the key
        (["position"], ["position"], {"1": [4, 2], "2": [3, 1]}),  # ties possible: left alone
        (["maybe"], ["maybe"], {"1": [4, 2], "2": [1, 3]}),  # unique but NULLs tie
    ],
    ids=["primary-key", "unique-not-null", "covers-the-key", "not-unique", "unique-nullable"],
)
def test_only_a_total_order_is_grouped(
    source: Source, order_by: list[str] | None, grouped: list[str], expected: dict[str, list[int]]
) -> None:
    order, docs = comments(source, **({"order_by": order_by} if order_by else {}))
    assert order == grouped
    assert docs == expected


def test_a_remote_key_whose_equality_is_not_pythons_keeps_the_relations_order(source: Source) -> None:
    # a TIME key (PostgreSQL's time with time zone holds one Python value as two database ones)
    order, docs = comments(source, local_key=["title"], remote_key=["at_time"])
    assert order == ["id"]
    assert docs == {"1": [], "2": []}
