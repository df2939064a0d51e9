"""The sample shop in SQLite, ready for polling change capture: an ``updated_at`` in every table
(all rows at :data:`T0`) and a ``gone`` table of deleted keys (``changes.tombstones``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sparkindex.demo.shop import generate_shop

#: every row's ``updated_at`` as generated: a change stamps a later one
T0 = "2026-01-01 00:00:00"


def polled_shop_db(db: Path, products: int, reviews_per_product: int = 3) -> Path:
    """Generate the shop at *db* with the polling columns and the ``gone`` table; returns *db*."""
    db.parent.mkdir(parents=True, exist_ok=True)
    generate_shop(db, products, reviews_per_product=reviews_per_product)
    conn = sqlite3.connect(db)
    for table in ("products", "categories", "reviews", "users"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN updated_at DATETIME NOT NULL DEFAULT '{T0}'")
    conn.execute("CREATE TABLE gone (tbl TEXT NOT NULL, row_key TEXT NOT NULL, updated_at DATETIME NOT NULL)")
    conn.commit()
    conn.close()
    return db
