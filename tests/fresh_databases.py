"""A fresh, private database of each dialect for tests that bring their own schema.

SQLite: a file in a temporary folder. PostgreSQL: a new schema reached through ``search_path``.
MariaDB: a new database with a binary collation (strings compare by code point, as elsewhere).
Each is dropped afterwards. The servers are the ones ``make test`` starts
(``scripts/test-services.sh``); tests using them carry the ``postgres``/``mysql`` markers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url

DIALECTS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@contextmanager
def fresh_database(
    kind: str, folder: Path, server_urls: Callable[[], dict[str, str]], load: Callable[[sa.Engine], None]
) -> Iterator[str]:
    """Yield the URL (as a pipeline's ``source.url``) of a new database of *kind* that *load* filled.

    *server_urls* is called only for server dialects (it may start the services).
    """
    name = f"t_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        url = f"sqlite:///{folder / 'source.db'}"
        drop = None
    elif kind == "postgres":
        server = server_urls()["postgres"]
        admin = sa.create_engine(normalize_url(server))
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{name}"'))
        url = sa.make_url(server).update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(False)
        drop = (admin, f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    else:
        server = server_urls()["mysql"]
        admin = sa.create_engine(normalize_url(server))
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        url = sa.make_url(server).set(database=name).render_as_string(hide_password=False)
        drop = (admin, f"DROP DATABASE IF EXISTS `{name}`")
    try:
        engine = sa.create_engine(normalize_url(url))
        try:
            load(engine)
        finally:
            engine.dispose()
        yield url
    finally:
        if drop is not None:
            admin, statement = drop
            with admin.begin() as conn:
                conn.execute(sa.text(statement))
            admin.dispose()
