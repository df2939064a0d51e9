"""The coordination conformance suite: every test here runs against SQLite, PostgreSQL and MariaDB.

The ``store`` fixture is built from ``store_url`` (tests/conftest.py), which is parametrized over
the three store kinds and gives each test a fresh, isolated store.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkindex.coordination.locks import LockManager
from sparkindex.coordination.store import CoordinationStore


@pytest.fixture
def store(store_url: tuple[str, str]) -> Iterator[CoordinationStore]:
    url, prefix = store_url
    s = CoordinationStore(url, prefix)
    yield s
    s.close()


@pytest.fixture
def locks(store: CoordinationStore) -> LockManager:
    return store.locks
