"""Helpers for end-to-end tests on the sample shop."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop


def make_shop(
    directory: Path,
    products: int,
    partition_size: int,
    extra_yaml: str = "",
    page_size: int | None = None,
    batch_size: int | None = None,
    sync_every_s: float | None = None,
) -> Pipeline:
    directory.mkdir(parents=True, exist_ok=True)
    generate_shop(directory / "shop.db", products)
    text = PIPELINE_YAML.format(partition_size=partition_size).replace("master: local[*,4]", "master: local[2,4]")
    if page_size is not None:
        text = text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n    page_size: {page_size}\n")
    if batch_size is not None:
        text = text.replace("  batch_size: 25000\n", f"  batch_size: {batch_size}\n")
    if sync_every_s is not None:  # how often cursors move: tests that stop a partition mid-way
        text = text.replace("\njob:\n", f"\njob:\n  sync_every_s: {sync_every_s}\n")
    (directory / "pipeline.yaml").write_text(text + extra_yaml, encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml")


def execute(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(db)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> None:
    """Poll *predicate* until it holds; the condition is the synchronisation, not the clock."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def fresh_database(server_url: str, name: str) -> str:
    """Create (or recreate) database *name* on a PostgreSQL/MySQL server; return its URL."""
    import sqlalchemy as sa

    from sparkindex.config.urls import normalize_url

    url = sa.make_url(normalize_url(server_url))
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, name: str) -> None:
    """Drop database *name* made by :func:`fresh_database`, closing what still holds it (PostgreSQL)."""
    import sqlalchemy as sa

    from sparkindex.config.urls import normalize_url

    url = sa.make_url(normalize_url(server_url))
    force = " WITH (FORCE)" if url.get_backend_name() == "postgresql" else ""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
    admin.dispose()


def copy_shop(sqlite_db: Path, url: str) -> None:
    """Copy the generated shop (schema and rows) from SQLite into another database."""
    import sqlalchemy as sa

    src = sa.create_engine(f"sqlite:///{sqlite_db}")
    dst = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(src)
    for table in meta.sorted_tables:  # portable types: reflected SQLite types map cleanly
        for col in table.columns:
            if isinstance(col.type, sa.DateTime):
                col.type = sa.DateTime()
            elif isinstance(col.type, sa.Float | sa.REAL):
                col.type = sa.Float(precision=53)
    meta.create_all(dst)
    with src.connect() as read, dst.begin() as write:
        for table in meta.sorted_tables:
            rows = [r._asdict() for r in read.execute(sa.select(table))]
            for i in range(0, len(rows), 5000):
                write.execute(table.insert(), rows[i : i + 5000])
    src.dispose()
    dst.dispose()
