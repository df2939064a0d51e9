"""A relation whose keys differ in type on the two sides still finds its rows.

SQLite keeps a NUMERIC column's values as numbers, which SQLAlchemy reads back as ``Decimal``;
the builder matches them against the related table's INTEGER key with an ``IN`` list. The
values must bind as SQLAlchemy derives their type from the column and the values themselves
(a ``Decimal`` as a number): bound with the INTEGER column's type alone, sqlite3 refuses a
``Decimal`` and the page fails for good (review of the issue-19 speed work).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.sqlite_files import sqlite_source

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.documents import DocumentBuilder, resolve_index
from sparkindex.documents.builder import Page
from sparkindex.sources.base import KeyRange, Source


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    src = sqlite_source(
        tmp_path / "keys.db",
        """
        CREATE TABLE owners (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE pets (id INTEGER PRIMARY KEY, owner_ref NUMERIC, name TEXT);
        CREATE TABLE visits (id INTEGER PRIMARY KEY, pet_ref NUMERIC, note TEXT);
        INSERT INTO owners VALUES (1, 'Ann'), (2, 'Bob');
        INSERT INTO pets VALUES (10, 1, 'Rex'), (11, 2, 'Tom'), (12, NULL, 'Stray'), (13, 3, 'Lost');
        INSERT INTO visits VALUES (100, 10, 'first'), (101, 10, 'second'), (102, 11, 'only');
        """,
    )
    yield src
    src.close()


def pets_page(source: Source, relation: RelationConfig) -> Page:
    """Every pet's document, with *relation* attached."""
    plan = resolve_index(source, IndexConfig(alias="pets", table="pets", relations=[relation]), "indexes[0]")
    return DocumentBuilder(source, plan).page(KeyRange(None, None), None, 100)


def test_a_numeric_parent_key_finds_its_integer_keyed_relation(source: Source) -> None:
    page = pets_page(
        source, RelationConfig(name="owner", type="object", table="owners", local_key=["owner_ref"], remote_key=["id"])
    )
    docs = {d.id: d.fields for d in page.docs}
    assert page.failures == []
    assert docs["10"] is not None and docs["10"]["owner_ref"] == decimal.Decimal(1)
    assert {k: (v or {}).get("owner") for k, v in docs.items()} == {
        "10": {"id": 1, "name": "Ann"},
        "11": {"id": 2, "name": "Bob"},
        "12": None,  # no key
        "13": None,  # a key no owner has
    }


def test_an_integer_parent_key_finds_its_numeric_keyed_children(source: Source) -> None:
    page = pets_page(
        source, RelationConfig(name="visits", type="nested", table="visits", local_key=["id"], remote_key=["pet_ref"])
    )
    visits = {d.id: [v["note"] for v in (d.fields or {})["visits"]] for d in page.docs}
    assert page.failures == []
    assert visits == {"10": ["first", "second"], "11": ["only"], "12": [], "13": []}
