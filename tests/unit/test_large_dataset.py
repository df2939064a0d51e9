"""The large-documents generator builds what the benchmark claims to measure.

The benchmark's figures are about documents of about 2 KB with about 4 nested children and a
three-level object chain; if the generator drifted, the benchmark would silently measure
something else. Built through the pipeline's own builder, so the sizes are the indexed ones.
"""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path

import orjson

from sparkindex.config import load_pipeline
from sparkindex.demo.large import counts_for, generate_large_sqlite, write_large_pipeline
from sparkindex.documents import DocumentBuilder, resolve_index
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange

N = 1500


def _docs(tmp_path: Path) -> list[bytes]:
    pipeline = load_pipeline(write_large_pipeline(tmp_path))
    source = open_source_url(pipeline.source_url())
    plan = resolve_index(source, pipeline.indexes[0], "indexes[0]")
    builder = DocumentBuilder(source, plan)
    out: list[bytes] = []
    after = None
    while True:
        page = builder.page(KeyRange(None, None), after, 500)
        out.extend(d.source for d in page.docs)
        if page.rows < 500:
            return out
        after = page.last_key


def test_row_counts_and_determinism(tmp_path: Path) -> None:
    counts = generate_large_sqlite(tmp_path / "large.db", N)
    expected = counts_for(N)
    for table in ("countries", "organisations", "authors", "articles"):
        assert counts[table] == expected[table]
    assert 3.5 * N <= counts["comments"] <= 4.5 * N
    conn = sqlite3.connect(tmp_path / "large.db")
    first = conn.execute("SELECT * FROM articles ORDER BY id LIMIT 3").fetchall()
    assert conn.execute("SELECT count(*) FROM articles").fetchone()[0] == N
    assert conn.execute("SELECT count(*) FROM articles WHERE subtitle IS NULL").fetchone()[0] > 0
    conn.close()
    again = tmp_path / "again"
    generate_large_sqlite(again / "large.db", N)
    conn = sqlite3.connect(again / "large.db")
    assert conn.execute("SELECT * FROM articles ORDER BY id LIMIT 3").fetchall() == first
    conn.close()


def test_documents_are_about_2kb_with_4_children_and_a_3_level_chain(tmp_path: Path) -> None:
    generate_large_sqlite(tmp_path / "large.db", N)
    docs = _docs(tmp_path)
    assert len(docs) == N
    mean_size = statistics.mean(len(d) for d in docs)
    assert 2048 * 0.7 <= mean_size <= 2048 * 1.3, mean_size
    parsed = [orjson.loads(d) for d in docs]
    assert 3.5 <= statistics.mean(len(p["comments"]) for p in parsed) <= 4.5
    chained = [p for p in parsed if p["author"]["organisation"] and p["author"]["organisation"]["country"]]
    assert len(chained) > 0.8 * N
    assert chained[0]["author"]["organisation"]["country"]["code"]
    # Hostile text survives the round trip: non-Latin scripts, quotes, NULLs.
    text = b"".join(docs).decode()
    assert any(ch in text for ch in "東京Москва") and '\\"quoted\\"' in text
    assert any(p["subtitle"] is None for p in parsed)
