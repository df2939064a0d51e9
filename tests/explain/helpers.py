"""Running ``sparkindex explain`` and ``reindex`` as a user does, and what a folder holds."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url
from tests.e2e.shop import copy_shop
from tests.e2e.shop import fresh_database as fresh_server_database


def run_cli(cli: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=timeout)


def explain_json(cli: Path, config: Path, *args: str) -> dict[str, Any]:
    """``explain --json``'s object; fails the test on any exit but 0."""
    run = run_cli(cli, "explain", "-c", str(config), "--json", *args)
    assert run.returncode == 0, f"explain exited {run.returncode}:\n{run.stderr[-3000:]}"
    body: dict[str, Any] = orjson.loads(run.stdout.strip().splitlines()[-1])
    return body


def reindex(cli: Path, config: Path) -> dict[str, Any]:
    """A reindex in its own process: when it returns, nothing of it holds a file open any more,
    so a folder compared afterwards changes only if explain changes it."""
    run = run_cli(cli, "reindex", "-c", str(config), "--json", timeout=600)
    assert run.returncode == 0, f"reindex exited {run.returncode}:\n{run.stderr[-3000:]}"
    summary: dict[str, Any] = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert summary["status"] == "COMPLETED", summary
    return summary


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under *folder*: relative path -> (size, modification time in ns)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(folder))] = (st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


@contextmanager
def shop_on_server(sqlite_db: Path, server_url: str) -> Iterator[str]:
    """The shop copied into a new database on a PostgreSQL or MariaDB server; dropped afterwards."""
    name = f"expl_{uuid.uuid4().hex[:10]}"
    url = fresh_server_database(server_url, name)
    try:
        copy_shop(sqlite_db, normalize_url(url))
        yield url
    finally:
        admin = sa.create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()
