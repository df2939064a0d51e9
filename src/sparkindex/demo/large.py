"""Generating the "large documents" database: articles of about 2 KB with nested comments.

Why it exists: the shop's documents are small, and small documents hide the per-document costs
(encoding, crossing processes, Tantivy's per-field work) that dominate real indexes. The
large-document benchmark (docs/benchmarks.md) runs on documents of about 2 KB with about 4 nested
children and a three-level object chain, from SQLite and PostgreSQL, at 500,000 rows and more.
This module builds exactly that:

    articles (root: title, subtitle, summary, a ~1 KB body, tags, dates, numbers)
      ├─ comments   nested, 2..6 per article (about 4), each with a text body
      └─ author     object → organisation object → country object (three levels)

The data is deterministic for a seed (tests and the naive baseline can recompute it) and hostile
enough to be realistic: punctuation, quotes, backslashes, non-Latin scripts, emoji and NULLs
(subtitles, ratings, an author's organisation, an organisation's country).

Speed matters because the benchmark generates 500k-1M rows before measuring anything: text is
composed from a pre-built pool of sentences with ``random.choices`` (one call per field, not one
per word), SQLite is written with ``executemany`` in one transaction with journaling and syncing
off, and PostgreSQL with ``COPY``. The same row stream feeds both, so both hold the same data.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Row = tuple[Any, ...]

_TEXT = (
    "index search spark partition resume cursor document nested object shard merge commit writer "
    "reader source target alias version claim lease token fence upsert delete verify hash stale "
    "missing extra duplicate crash retry backoff throughput latency memory worker driver executor "
    "Zürich café naïve façade coöperate jalapeño São Paulo Kraków Ærø Øresund "
    "東京 北京 서울 Москва Αθήνα القاهرة मुंबई"
)
_WORDS = _TEXT.split()
_PUNCT = [".", ",", ";", ":", "!", "?", " —", " (sic)", ' "quoted"', " 'single'", " a\\b", " <tag>&amp;", " 🚀", " ✓"]
_COUNTRIES = [
    ("DE", "Germany", "Europe"),
    ("FR", "France", "Europe"),
    ("US", "United States", "Americas"),
    ("BR", "Brasil", "Americas"),
    ("JP", "日本", "Asia"),
    ("KR", "대한민국", "Asia"),
    ("IN", "India", "Asia"),
    ("EG", "مصر", "Africa"),
    ("GR", "Ελλάδα", "Europe"),
    ("PL", "Polska", "Europe"),
    ("SE", "Sverige", "Europe"),
    ("AU", "Australia", "Oceania"),
]

TABLES = ("countries", "organisations", "authors", "articles", "comments")

COLUMNS: dict[str, tuple[str, ...]] = {
    "countries": ("code", "name", "region"),
    "organisations": ("id", "name", "city", "founded", "country_code"),
    "authors": ("id", "name", "email", "bio", "organisation_id"),
    "articles": (
        "id",
        "title",
        "subtitle",
        "summary",
        "body",
        "tags",
        "language",
        "published_at",
        "views",
        "score",
        "author_id",
    ),
    "comments": ("id", "article_id", "commenter", "body", "rating", "created_at"),
}

# Portable DDL; {ts}/{real}/{text} are filled per dialect. Foreign keys are declared so key
# inference works too, although the pipeline below names every key explicitly.
_DDL = """
CREATE TABLE countries (code VARCHAR(2) PRIMARY KEY, name {text} NOT NULL, region {text});
CREATE TABLE organisations (
  id INTEGER PRIMARY KEY, name {text} NOT NULL, city {text}, founded INTEGER,
  country_code VARCHAR(2) REFERENCES countries(code));
CREATE TABLE authors (
  id INTEGER PRIMARY KEY, name {text} NOT NULL, email {text}, bio {text},
  organisation_id INTEGER REFERENCES organisations(id));
CREATE TABLE articles (
  id INTEGER PRIMARY KEY, title {text} NOT NULL, subtitle {text}, summary {text}, body {text},
  tags {text}, language VARCHAR(8), published_at {ts} NOT NULL, views INTEGER NOT NULL,
  score {real}, author_id INTEGER REFERENCES authors(id));
CREATE TABLE comments (
  id INTEGER PRIMARY KEY, article_id INTEGER NOT NULL REFERENCES articles(id), commenter {text},
  body {text}, rating INTEGER, created_at {ts} NOT NULL);
"""
_INDEXES = "CREATE INDEX comments_article ON comments(article_id)"

PIPELINE_YAML = """\
# Large nested documents (about 2 KB, about 4 comments each, author -> organisation -> country).
source:
  url: {source_url}
coordination:
  url: {coordination_url}{prefix}
target:
  url: tantivy://index
spark:
  master: {master}
indexes:
  - alias: articles
    table: articles
    partition_size: {partition_size}
    complexity: 4.0
    relations:
      - name: author
        type: object
        table: authors
        local_key: author_id
        remote_key: id
        relations:
          - name: organisation
            type: object
            table: organisations
            local_key: organisation_id
            remote_key: id
            relations:
              - name: country
                type: object
                table: countries
                local_key: country_code
                remote_key: code
      - name: comments
        type: nested
        table: comments
        local_key: id
        remote_key: article_id
        order_by: id
    fields:
      title: {{analyzer: english, keyword: true, copy_to: [all_text]}}
      summary: {{analyzer: english, copy_to: [all_text]}}
      body: {{analyzer: english, copy_to: [all_text]}}
job:
  batch_size: {batch_size}
"""


def ddl(dialect: str) -> list[str]:
    """The schema's statements for ``sqlite`` or ``postgresql``."""
    if dialect == "sqlite":
        types = {"ts": "DATETIME", "real": "REAL", "text": "TEXT"}
    else:
        types = {"ts": "TIMESTAMP", "real": "DOUBLE PRECISION", "text": "TEXT"}
    stmts = [s.strip() for s in _DDL.format(**types).split(";") if s.strip()]
    return [*stmts, _INDEXES]


def counts_for(articles: int) -> dict[str, int]:
    """How many rows each dimension table gets for *articles* roots (comments vary, about 4 each)."""
    return {
        "countries": len(_COUNTRIES),
        "organisations": max(5, articles // 200),
        "authors": max(20, articles // 20),
        "articles": articles,
    }


def _sentences(rng: random.Random, n: int, words_per: tuple[int, int] = (8, 16)) -> list[str]:
    """*n* sentences of ``words_per`` (inclusive) words from the hostile pool; bench/wide.py's
    shorter comments use the same pool."""
    out = []
    for _ in range(n):
        words = rng.choices(_WORDS, k=rng.randint(*words_per))
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice(_PUNCT))
    return out


def generate_rows(articles: int, seed: int = 11, batch: int = 20_000) -> Iterator[tuple[str, list[Row]]]:
    """Yield ``(table, rows)`` batches in an order that satisfies the foreign keys."""
    rng = random.Random(seed)
    pool = _sentences(rng, 4096)
    short = [s for s in pool if len(s) < 110] or pool
    sizes = counts_for(articles)
    n_org, n_auth = sizes["organisations"], sizes["authors"]
    yield "countries", list(_COUNTRIES)
    yield (
        "organisations",
        [
            (
                i,
                f"{rng.choice(_WORDS).title()} & {rng.choice(_WORDS)} GmbH #{i}",
                rng.choice(_WORDS),
                rng.randint(1850, 2024),
                None if i % 17 == 0 else _COUNTRIES[i % len(_COUNTRIES)][0],
            )
            for i in range(1, n_org + 1)
        ],
    )
    yield (
        "authors",
        [
            (
                i,
                f"{rng.choice(_WORDS).title()} O'{rng.choice(_WORDS).title()}",
                f"author{i}@example.org",
                rng.choice(short),
                None if i % 23 == 0 else rng.randint(1, n_org),
            )
            for i in range(1, n_auth + 1)
        ],
    )
    comment_id = 0
    arts: list[Row] = []
    comments: list[Row] = []
    # The hot loop draws with rnd() and indexes pre-built pools: randint/choice cost several
    # times more per call, and 500k articles make about 15M draws.
    choices, rnd = rng.choices, rng.random
    clock = [f"{h:02d}:{m:02d}:{sec:02d}" for h in range(24) for m in range(0, 60, 7) for sec in range(0, 60, 13)]
    days = [f"20{y}-{mo:02d}-{d:02d}" for y in range(10, 26) for mo in range(1, 13) for d in range(1, 29)]
    n_words, n_short, n_clock, n_days = len(_WORDS), len(short), len(clock), len(days)
    for aid in range(1, articles + 1):
        day = days[int(rnd() * n_days)]
        arts.append(
            (
                aid,
                f"{' '.join(choices(_WORDS, k=6))} #{aid}",
                None if aid % 10 == 0 else " ".join(choices(_WORDS, k=8)),
                " ".join(choices(short, k=2)),
                " ".join(choices(pool, k=8)),
                ",".join(choices(_WORDS, k=4)),
                ("en", "de", "fr", "ja", "ar")[aid % 5],
                f"{day} {clock[int(rnd() * n_clock)][:5]}:00",
                int(rnd() * 1_000_000),
                None if aid % 13 == 0 else round(rnd() * 100, 3),
                1 + int(rnd() * n_auth),
            )
        )
        for _ in range(2 + int(rnd() * 5)):
            comment_id += 1
            comments.append(
                (
                    comment_id,
                    aid,
                    None if comment_id % 19 == 0 else f"{_WORDS[int(rnd() * n_words)]}_{comment_id % 9973}",
                    short[int(rnd() * n_short)],
                    None if comment_id % 7 == 0 else 1 + int(rnd() * 5),
                    f"{day} {clock[int(rnd() * n_clock)]}",
                )
            )
        if len(arts) >= batch:
            yield "articles", arts
            yield "comments", comments
            arts, comments = [], []
    if arts:
        yield "articles", arts
        yield "comments", comments


def generate_large_sqlite(path: Path, articles: int, seed: int = 11) -> dict[str, int]:
    """Create the database at *path* (replacing it); return row counts per table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        for stmt in ddl("sqlite")[:-1]:
            conn.execute(stmt)
        counts = dict.fromkeys(TABLES, 0)
        for table, rows in generate_rows(articles, seed):
            marks = ", ".join("?" * len(COLUMNS[table]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            counts[table] += len(rows)
        conn.execute(ddl("sqlite")[-1])  # the index after the rows: one sort instead of 2M inserts
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    return counts


def generate_large_postgres(url: str, articles: int, seed: int = 11, schema: str | None = None) -> dict[str, int]:
    """Create the tables (in *schema* if given, replacing it) at *url* with COPY; return row counts.

    *url* is a libpq or SQLAlchemy URL (``postgresql+psycopg://`` is accepted).
    """
    import psycopg

    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo) as conn:
        with conn.cursor() as cur:
            if schema:
                cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                cur.execute(f'CREATE SCHEMA "{schema}"')
                cur.execute(f'SET search_path TO "{schema}"')
            else:
                cur.execute("DROP TABLE IF EXISTS " + ", ".join(reversed(TABLES)) + " CASCADE")
            stmts = ddl("postgresql")
            # Constraints and the index after the rows: COPY into bare tables, then build once.
            for stmt in stmts[:-1]:
                cur.execute(_strip_references(stmt))
            counts = dict.fromkeys(TABLES, 0)
            for table, rows in generate_rows(articles, seed):
                with cur.copy(f"COPY {table} ({', '.join(COLUMNS[table])}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
                counts[table] += len(rows)
            cur.execute(stmts[-1])
            cur.execute("ALTER TABLE organisations ADD FOREIGN KEY (country_code) REFERENCES countries(code)")
            cur.execute("ALTER TABLE authors ADD FOREIGN KEY (organisation_id) REFERENCES organisations(id)")
            cur.execute("ALTER TABLE articles ADD FOREIGN KEY (author_id) REFERENCES authors(id)")
            cur.execute("ALTER TABLE comments ADD FOREIGN KEY (article_id) REFERENCES articles(id)")
        conn.commit()
        with conn.cursor() as cur:
            if schema:
                cur.execute(f'SET search_path TO "{schema}"')
            cur.execute("ANALYZE")
        conn.commit()
    return counts


def _strip_references(stmt: str) -> str:
    import re

    return re.sub(r"\s+REFERENCES \w+\(\w+\)", "", stmt)


def write_large_pipeline(
    directory: Path,
    source_url: str = "sqlite:///large.db",
    partition_size: int = 10_000,
    coordination_url: str = "sqlite:///.sparkindex/state.db",
    coordination_prefix: str = "",
    master: str = "local[*,4]",
    batch_size: int = 5000,
) -> Path:
    """Write ``pipeline.yaml`` for the large dataset into *directory*; return its path."""
    path = directory / "pipeline.yaml"
    prefix = f"\n  prefix: {coordination_prefix}" if coordination_prefix else ""
    text = PIPELINE_YAML.format(
        source_url=source_url,
        coordination_url=coordination_url,
        prefix=prefix,
        master=master,
        partition_size=partition_size,
        batch_size=batch_size,
    )
    path.write_text(text, encoding="utf-8")
    return path
