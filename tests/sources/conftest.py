"""Fixtures of the source conformance suite: the same fixture data loaded into every dialect.

``loaded_database`` creates a fresh, private database per dialect (an SQLite file in a temporary
folder, a new PostgreSQL schema reached through ``search_path``, a new MariaDB database), loads
:mod:`tests.sources.fixture_data` into it once per module (the tests only read) and drops it
afterwards. ``source_db`` opens a new :class:`~sparkindex.sources.Source` on it for every test, so
no test sees another's reflection cache or connections.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url
from sparkindex.resources import open_source_url
from sparkindex.sources.base import Source
from tests.sources import fixture_data

DIALECTS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@dataclass(frozen=True)
class LoadedDatabase:
    kind: str
    url: str  # what a pipeline would put in source.url


def _load(url: str) -> None:
    engine = sa.create_engine(normalize_url(url))
    try:
        fixture_data.load(engine)
    finally:
        engine.dispose()


@contextmanager
def _sqlite(folder: Path) -> Iterator[str]:
    url = f"sqlite:///{folder / 'source.db'}"
    _load(url)
    yield url


@contextmanager
def _postgres(server_url: str) -> Iterator[str]:
    schema = f"conformance_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(normalize_url(server_url))
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        # Unqualified names (reflection, get_table_names, every query) resolve in the new schema only.
        url = (
            sa.make_url(server_url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
        _load(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def _mysql(server_url: str) -> Iterator[str]:
    database = f"conformance_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(normalize_url(server_url))
    try:
        with admin.begin() as conn:
            # Explicit, so the suite does not depend on the server's defaults: utf8mb4 for emoji,
            # a binary collation so string keys sort by code point as in the other dialects.
            conn.execute(sa.text(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        url = sa.make_url(server_url).set(database=database).render_as_string(hide_password=False)
        _load(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{database}`"))
        admin.dispose()


@pytest.fixture(scope="module", params=DIALECTS)
def loaded_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoadedDatabase]:
    """A fresh database of one dialect holding the fixture data; dropped after the module."""
    kind = request.param
    if kind == "sqlite":
        database = _sqlite(tmp_path_factory.mktemp("sqlite-source"))
    else:
        database = (_postgres if kind == "postgres" else _mysql)(request.getfixturevalue("services")[kind])
    with database as url:
        yield LoadedDatabase(kind, url)


@pytest.fixture
def source_db(loaded_database: LoadedDatabase) -> Iterator[Source]:
    """An opened source on the fixture database of each dialect (sqlite, postgres, mysql)."""
    source = open_source_url(loaded_database.url)
    yield source
    source.close()


@pytest.fixture(scope="session")
def reference_source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    """The same fixture data in its own SQLite file: what every dialect is compared against."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite-reference') / 'reference.db'}"
    _load(url)
    source = open_source_url(url)
    yield source
    source.close()
