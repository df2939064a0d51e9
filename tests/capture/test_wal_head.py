"""The head of a PostgreSQL change source on a server whose WAL tail is not flushed: with
``synchronous_commit = off`` and a transaction that has written but not committed, nothing
flushes the tail until a background record comes (up to 15 s). The head must not wait for that,
nor fail as if the server were unreachable (seen in CI: a catch-up failed its job this way)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from sparkindex.sources.postgres.changes import PostgresChangeSource
from sparkindex.sources.postgres.slots import lsn_int
from sparkindex.sources.registry import open_source
from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=20)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def test_the_head_is_flushed_without_waiting_for_the_server(shop: Shop) -> None:
    source = open_source(shop.pipeline.source_url())
    changes = PostgresChangeSource(shop.pipeline, source, [], "head-probe")
    # far below the 15 s a background record may take: only a flush of our own meets it
    changes.flush_wait_s = 0.3
    dsn = sa.make_url(shop.pipeline.source_url()).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as open_writer:
        open_writer.execute("SET synchronous_commit = off")
        open_writer.execute("UPDATE products SET stock = stock + 1 WHERE id = 1")  # written, not committed
        try:
            for _ in range(5):
                head = changes.head()
                with psycopg.connect(dsn, autocommit=True) as probe:
                    row = probe.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
                assert row is not None and lsn_int(row[0]) >= head["lsn"], (row, head)
                open_writer.execute("UPDATE products SET stock = stock + 1 WHERE id = 2")
        finally:
            open_writer.rollback()
            changes.close()


def test_a_head_read_uses_no_privilege_beyond_a_read_only_session(shop: Shop, services: dict[str, Any]) -> None:
    """The forced flush commits an empty transaction: allowed in a read-only session."""
    dsn = sa.make_url(shop.pipeline.source_url()).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = on")
        with conn.cursor() as cur:
            PostgresChangeSource._force_flush(cur)
            assert PostgresChangeSource._flushed(cur) > 0
