"""Generating the sample shop database: categories, users, products and their reviews.

Deterministic for a given seed, so tests can recompute what the index must contain. Written
with the stdlib driver and ``executemany``: this is fixture generation, not a read path.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from sparkindex.config.indexes import IndexConfig, RelationConfig

WORDS = [
    "solid",
    "light",
    "wooden",
    "steel",
    "compact",
    "quiet",
    "wireless",
    "portable",
    "classic",
    "modern",
    "vintage",
    "smart",
    "durable",
    "soft",
    "bright",
    "warm",
    "fresh",
    "organic",
    "premium",
    "rugged",
    "slim",
    "elegant",
    "handy",
    "sturdy",
    "silent",
    "lamp",
    "chair",
    "desk",
    "kettle",
    "speaker",
    "jacket",
    "shoe",
    "backpack",
    "bottle",
    "camera",
    "blender",
    "pillow",
    "watch",
    "guitar",
    "bicycle",
    "tent",
    "mug",
    "knife",
    "scarf",
    "table",
    "sofa",
    "drill",
    "helmet",
    "glove",
    "boot",
    "radio",
    "clock",
]
REVIEW_WORDS = [
    "great",
    "good",
    "terrible",
    "awful",
    "excellent",
    "broke",
    "works",
    "perfectly",
    "arrived",
    "late",
    "quickly",
    "cheap",
    "sturdy",
    "flimsy",
    "love",
    "hate",
    "recommend",
    "would",
    "buy",
    "again",
    "value",
    "price",
    "quality",
    "battery",
    "sound",
]
COUNTRIES = ["DE", "FR", "US", "GB", "JP", "BR", "IN", "NL", "SE", "ES"]

SCHEMA = """
CREATE TABLE categories (id INTEGER PRIMARY KEY, name VARCHAR(64) NOT NULL, description TEXT);
CREATE TABLE users (id INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL, country VARCHAR(2));
CREATE TABLE products (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT,
  price REAL NOT NULL,
  stock INTEGER NOT NULL,
  category_id INTEGER REFERENCES categories(id),
  created_at DATETIME NOT NULL
);
CREATE TABLE reviews (
  id INTEGER PRIMARY KEY,
  product_id INTEGER NOT NULL REFERENCES products(id),
  author_id INTEGER NOT NULL REFERENCES users(id),
  rating INTEGER NOT NULL,
  body TEXT
);
CREATE INDEX reviews_product ON reviews(product_id);
"""

PIPELINE_YAML = """\
# The sample shop, indexed into an embedded Tantivy index. Paths are relative to this file.
source:
  url: sqlite:///shop.db
coordination:
  url: sqlite:///.sparkindex/state.db
target:
  url: tantivy://index
spark:
  master: local[*,4]
indexes:
  - alias: products
    table: products
    partition_size: {partition_size}
    complexity: 3.0
    relations:
      - name: category
        type: object
        table: categories
      - name: reviews
        type: nested
        table: reviews
        relations:
          - name: author
            type: object
            table: users
    fields:
      name: {{analyzer: english, keyword: true, copy_to: [all_text]}}
      description: {{analyzer: english, copy_to: [all_text]}}
job:
  batch_size: 25000
"""


def _sentence(rng: random.Random, words: list[str], n: int) -> str:
    return " ".join(rng.choice(words) for _ in range(n))


def generate_shop(path: Path, products: int, seed: int = 7, reviews_per_product: int = 3) -> dict[str, int]:
    """Create the shop database at *path* (replacing it); return row counts per table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    n_categories = 40
    n_users = max(10, products // 10)
    conn.executemany(
        "INSERT INTO categories VALUES (?, ?, ?)",
        [(i, f"{rng.choice(WORDS)}-{i}", _sentence(rng, WORDS, 8)) for i in range(1, n_categories + 1)],
    )
    conn.executemany(
        "INSERT INTO users VALUES (?, ?, ?)",
        [(i, f"user{i} {rng.choice(WORDS)}", rng.choice(COUNTRIES)) for i in range(1, n_users + 1)],
    )
    review_id = 0
    batch_p: list[tuple[object, ...]] = []
    batch_r: list[tuple[object, ...]] = []
    for pid in range(1, products + 1):
        batch_p.append(
            (
                pid,
                f"{_sentence(rng, WORDS, 3)} {pid}",
                _sentence(rng, WORDS, 20),
                round(rng.uniform(1, 500), 2),
                rng.randint(0, 1000),
                rng.randint(1, n_categories),
                f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:00:00",
            )
        )
        for _ in range(rng.randint(0, 2 * reviews_per_product)):
            review_id += 1
            batch_r.append(
                (review_id, pid, rng.randint(1, n_users), rng.randint(1, 5), _sentence(rng, REVIEW_WORDS, 12))
            )
        if len(batch_p) >= 20_000:
            conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)", batch_p)
            conn.executemany("INSERT INTO reviews VALUES (?, ?, ?, ?, ?)", batch_r)
            batch_p, batch_r = [], []
    conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)", batch_p)
    conn.executemany("INSERT INTO reviews VALUES (?, ?, ?, ?, ?)", batch_r)
    conn.commit()
    conn.close()
    return {"categories": n_categories, "users": n_users, "products": products, "reviews": review_id}


def write_demo_pipeline(directory: Path, partition_size: int = 5000) -> Path:
    path = directory / "pipeline.yaml"
    path.write_text(PIPELINE_YAML.format(partition_size=partition_size), encoding="utf-8")
    return path


def shop_index_config(alias: str = "products") -> IndexConfig:
    """The shop's products index (category object, reviews nested with their author), for code."""
    return IndexConfig(
        alias=alias,
        table="products",
        relations=[
            RelationConfig(name="category", type="object", table="categories"),
            RelationConfig(
                name="reviews",
                type="nested",
                table="reviews",
                relations=[RelationConfig(name="author", type="object", table="users")],
            ),
        ],
    )
