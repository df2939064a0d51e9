"""A real SQLite source made from a script, for tests that need a schema of their own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sparkindex.resources import open_source_url
from sparkindex.sources.base import Source


def sqlite_source(path: Path, script: str) -> Source:
    """Run *script* in a new SQLite file at *path* and open it as a source (close it after)."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
        conn.commit()
    finally:
        conn.close()
    return open_source_url(f"sqlite:///{path}")
