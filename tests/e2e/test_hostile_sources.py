"""End to end on the servers' own collations and on huge rows: MariaDB and PostgreSQL, real Spark.

* MariaDB compares ``utf8mb4_unicode_ci`` keys case- and accent-insensitively, so its order and
  its idea of "equal" differ from Python's and from byte order; partition boundaries must still
  neither overlap nor leave gaps.
* Rows of megabytes (a long text, a large JSON-ish blob) cross pages, bulks and the writer
  service intact; the byte-size split of bulks must not drop or split a document.

Each reindex is checked by its counts (partitions' acknowledged counts = rows = index) and by
``sparkindex verify --json`` as a user runs it.
"""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_store, open_target
from tests.e2e.guarantee_helpers import pg_table, run_cli, write_pipeline

pytestmark = pytest.mark.slow


def folded(key: str) -> str:
    """What utf8mb4_unicode_ci considers the same key: case, accents and trailing blanks (a PAD
    SPACE collation) ignored."""
    bare = "".join(c for c in unicodedata.normalize("NFD", key.casefold()) if not unicodedata.combining(c))
    return bare.rstrip(" ")


def ci_keys(n: int) -> list[str]:
    """Keys unique under a case- and accent-insensitive collation, in mixed case, accents and
    punctuation (separators included), whose collation order differs from Python's."""
    rng = random.Random(61)
    alphabet = "aAbBeEéÉöÖ-_. ,'!|\\"
    seen: dict[str, str] = {}
    for key in ["a-b", "A_b", "a b", "Ab.", "é", "E|x", "ö\\", "-", "_", "Zz", "zZ!"]:
        seen.setdefault(folded(key), key)
    while len(seen) < n:
        key = rng.choice("aAbBeEéÉöÖ") + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
        seen.setdefault(folded(key), key)
    return list(seen.values())


def assert_exact(pipeline: Any, summary: Any, rows: int) -> None:
    with open_store(pipeline) as store:
        assert summary.status == "COMPLETED", store.job_rows.job(summary.job_id).error_message
        parts = store.partition_rows.partitions(summary.job_id)
    assert summary.indexed == summary.source_rows == rows
    assert len(parts) >= 2, "the key space must really be split"
    assert sum(p.success_count for p in parts) == rows, "partitions overlap or leave gaps"


def verify_json(cli: Path, pipeline_dir: Path) -> dict[str, Any]:
    done = run_cli(cli, "verify", "-c", str(pipeline_dir / "pipeline.yaml"), "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.mysql
def test_mariadb_case_and_accent_insensitive_keys(
    tmp_path: Path, spark: Any, cli: Path, services: dict[str, str]
) -> None:
    keys = ci_keys(3000)
    rows = [(k, i, f"label {k!r}") for i, k in enumerate(keys)]
    ddl = "id varchar(64) COLLATE utf8mb4_unicode_ci PRIMARY KEY, n integer NOT NULL, label text"
    with pg_table(services["mysql"], ddl, rows, "ci") as table:
        pipeline = write_pipeline(tmp_path, services["mysql"], "labels", table, "    partition_size: 150\n")
        summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert_exact(pipeline, summary, len(keys))
        report = verify_json(cli, tmp_path)
    assert {k: report[k] for k in ("missing", "extra", "stale", "duplicates")} == dict.fromkeys(
        ("missing", "extra", "stale", "duplicates"), 0
    )
    assert report["checked"] == report["index_docs"] == len(keys)


@pytest.mark.postgres
def test_huge_rows_arrive_whole(tmp_path: Path, spark: Any, cli: Path, services: dict[str, str]) -> None:
    rng = random.Random(7)
    big = {3, 17, 40}  # rows of several megabytes among small ones
    rows = []
    for i in range(60):
        size = 3_000_000 + i if i in big else 200
        body = "".join(rng.choice("abcdefghij klmnopqrstuvwxyzé|\\\"'") for _ in range(size))
        rows.append((i, body, None if i % 7 == 0 else f"note {i}"))
    ddl = "id integer PRIMARY KEY, body text NOT NULL, note text"
    with pg_table(services["postgres"], ddl, rows, "huge") as table:
        # bulks split by bytes well below one huge row: a row must never be split or dropped
        pipeline = write_pipeline(
            tmp_path,
            services["postgres"],
            "huge",
            table,
            "    partition_size: 20\n    page_size: 7\n",
            "  batch_bytes: 1000000\n",
        )
        summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
        assert_exact(pipeline, summary, 60)
        report = verify_json(cli, tmp_path)
        assert (report["missing"], report["stale"], report["extra"], report["duplicates"]) == (0, 0, 0, 0)
        assert report["checked"] == report["index_docs"] == 60
        with open_target(pipeline) as target:
            stored = {hit.id: hit.source for hit in target.search("huge", "", limit=100)}
    assert {i: len(stored[str(i)]["body"]) for i in big} == {i: 3_000_000 + i for i in big}
    assert stored["3"]["body"] == rows[3][1] and stored["7"]["note"] is None
