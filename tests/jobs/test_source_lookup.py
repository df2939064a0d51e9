"""From document ids back to rows, on every dialect's fixture data with hostile keys.

Every id the reindex writes must be found again (collated mixed-case text with ``|`` and ``\\``,
composite keys, NUMERIC, bytes, UUID); ids no row has must not be, including ids that a lookup
*does* match under the database's comparison (another case under a case-insensitive collation,
another scale of the same number): verify would call a real document extra, or keep a stale one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sparkindex.config.indexes import IndexConfig
from sparkindex.documents import resolve_index
from sparkindex.documents.source_lookup import SourceLookup
from sparkindex.keys import document_id
from sparkindex.sources.base import Source
from tests.sources.conftest import loaded_database, source_db  # noqa: F401 - fixtures of the conformance suite

TABLES = [
    ("labels", ("code",)),
    ("order_lines", ("order_no", "line")),
    ("amounts", ("amount",)),
    ("blobs", ("digest",)),
    ("tokens", ("id",)),
    ("products", ("id",)),
]


def real_ids(source: Source, table: str, key: Sequence[str]) -> list[str]:
    return [document_id(k) for k in source.walk_keys(source.table(table), key)]


def lookup_of(source: Source, table: str) -> SourceLookup:
    return SourceLookup(source, resolve_index(source, IndexConfig(alias=table, table=table), "indexes[0]"))


@pytest.mark.parametrize(("table", "key"), TABLES, ids=[t for t, _ in TABLES])
def test_every_id_the_reindex_writes_is_found(source_db: Source, table: str, key: tuple[str, ...]) -> None:  # noqa: F811
    ids = real_ids(source_db, table, key)
    assert len(ids) > 500
    assert lookup_of(source_db, table).existing(ids) == set(ids)


def forged(ids: Sequence[str], table: str) -> list[str]:
    """Ids no row has, many of which a lookup by key does match under the database's comparison."""
    known = set(ids)
    out = ["", "\\N", "no|such|parts|at|all", "zz-none", "1e400", "-0", "é" * 70]
    for doc_id in ids[:300]:
        out += [doc_id.swapcase(), doc_id + " ", " " + doc_id, doc_id + "|x", doc_id.upper(), doc_id.lower()]
        if table == "amounts":
            out += [doc_id + "0", doc_id.rstrip("0").rstrip(".")]  # the same number at another scale
        if table == "products":
            out += [f"0{doc_id}", f"{doc_id}.0", f"+{doc_id}"]
    return [f for f in dict.fromkeys(out) if f not in known]


@pytest.mark.parametrize(("table", "key"), TABLES, ids=[t for t, _ in TABLES])
def test_ids_no_row_has_are_not_found(source_db: Source, table: str, key: tuple[str, ...]) -> None:  # noqa: F811
    fakes = forged(real_ids(source_db, table, key), table)
    assert len(fakes) > 300
    assert lookup_of(source_db, table).existing(fakes) == set()


def test_found_ids_are_compared_as_ids_not_as_the_database_compares(source_db: Source) -> None:  # noqa: F811
    """The same number at another scale matches the row in SQL; it is still not that row's id."""
    ids = real_ids(source_db, "amounts", ("amount",))
    lookup = lookup_of(source_db, "amounts")
    with_scale = [i for i in ids if "." in i and i.endswith("0")][:20]
    assert with_scale, ids[:10]
    shorter = [i.rstrip("0").rstrip(".") for i in with_scale]
    assert lookup.existing([*with_scale, *shorter]) == set(with_scale)


def test_join_children_exist_with_their_row_and_their_parent(source_db: Source) -> None:  # noqa: F811
    """``reviews:<id>`` names a child document: found while its row and its product exist."""
    join = {"name": "reviews", "type": "join", "table": "reviews"}
    cfg = IndexConfig.model_validate({"alias": "products", "table": "products", "relations": [join]})
    lookup = SourceLookup(source_db, resolve_index(source_db, cfg, "indexes[0]"))
    reviews = [document_id(k) for k in source_db.walk_keys(source_db.table("reviews"), ["id"])]
    products = real_ids(source_db, "products", ("id",))
    children = [f"reviews:{r}" for r in reviews[:700]]
    fakes = ["reviews:999999999", "reviews:abc", "reviews:", "reviews:1|2", "review:1", f"reviews:{reviews[0]} "]
    assert lookup.existing([*children, *fakes, *products[:50]]) == {*children, *products[:50]}
    ref = lookup.child_of(children[0])
    assert ref is not None and ref.relation.name == "reviews"
    [parent] = lookup.parents_of(ref.relation, [ref.key]).values()
    assert document_id(parent) in set(products)
