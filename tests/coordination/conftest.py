"""The coordination conformance suite: every test here runs against SQLite, PostgreSQL, PostgreSQL
behind PgBouncer in transaction pooling, and MariaDB.

The ``store`` fixture is built from ``store_url``, which here is parametrized over the four store
kinds (tests/conftest.py's three, and PgBouncer) and gives each test a fresh, isolated store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.store import CoordinationStore
from tests.conftest import PGBOUNCER_KIND, STORE_KINDS, fresh_store


@pytest.fixture(params=[*STORE_KINDS, PGBOUNCER_KIND])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url, table prefix) of a fresh store of each kind, PgBouncer's included."""
    yield from fresh_store(request, tmp_path)


@pytest.fixture
def store(store_url: tuple[str, str]) -> Iterator[CoordinationStore]:
    url, prefix = store_url
    s = CoordinationStore(url, prefix)
    yield s
    s.close()


@pytest.fixture
def locks(store: CoordinationStore) -> LockManager:
    return store.locks
