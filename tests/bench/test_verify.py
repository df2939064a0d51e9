"""bench/verify.py at a tiny size from PostgreSQL (the SQLite line shares every step but the
loading), so the line cannot rot; CI's time is why one source.

Why: the line is the proof (or disproof) that verify of a clean index is several times faster than
the reindex it checks. A line that timed a verify which checked fewer documents, found drift, or
read a database left over from another run would report a speed-up that means nothing; and the
reader must see from the line itself whether verify took the checksum path. Speed is not asserted
here (2,000 rows on a shared machine): only the line's structure and its own checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bench.verify as verify_bench
import pytest
from bench.large import CliRun

ROWS = 2000
RANGE_KEYS = {"source", "index", "compared", "matched", "descended"}

pytestmark = pytest.mark.slow


def pg_database_exists(name: str) -> bool:
    import psycopg

    with psycopg.connect(verify_bench.pg_admin_url()) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def check_line(line: dict[str, Any], source: str) -> None:
    assert line["bench"] == "verify" and line["source"] == source and line["rows"] == ROWS, line
    assert "error" not in line, line
    assert line["checked"] == ROWS, line
    for key in ("seconds", "job_s", "reindex_seconds", "reindex_job_s", "ratio", "job_ratio"):
        assert isinstance(line[key], float) and line[key] > 0, (key, line)
    assert line["job_s"] <= line["seconds"] and line["reindex_job_s"] <= line["reindex_seconds"], line
    assert abs(line["ratio"] - line["reindex_seconds"] / line["seconds"]) < 0.01, line
    assert line["aim"] == verify_bench.AIM[source] and line["aim_met"] == (line["ratio"] >= line["aim"]), line
    assert set(line["path"]) == set(line["ranges"]) == {"products"}, line
    path, ranges = line["path"]["products"], line["ranges"]["products"]
    assert path in ("checksums", "documents"), line
    assert set(ranges) == RANGE_KEYS and ranges["source"] >= 1, line
    assert ranges["compared"] == ranges["matched"] + ranges["descended"], line
    if path == "checksums":  # a clean index: every range compared matched, none descended
        assert "products" not in line["path_reason"], line
        assert ranges["compared"] == ranges["matched"] == ranges["source"] and ranges["descended"] == 0, line
    else:
        assert line["path_reason"]["products"], line  # why not by checksum
        assert ranges["compared"] == 0, line


@pytest.mark.postgres
def test_postgres_line_in_a_database_of_its_own(services: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    create = verify_bench.create_pg_database

    def recorded() -> tuple[str, str]:
        name, url = create()
        made.append(name)
        return name, url

    monkeypatch.setattr(verify_bench, "create_pg_database", recorded)
    check_line(verify_bench.bench_verify("postgres", ROWS), "postgres")
    assert len(made) == 1 and not pg_database_exists(made[0]), made  # created for the run, dropped after it


# -- the line fails loudly when what it timed was wrong (no Spark: the CLI's answers are faked) ------
def fake_cli(monkeypatch: pytest.MonkeyPatch, summary: dict[str, Any], code: int = 0) -> None:
    monkeypatch.setattr(verify_bench, "run_cli", lambda pipeline, verb, *extra: CliRun(summary, 1.0, code))


CLEAN = {"checked": ROWS, "clean": True, "missing": 0, "extra": 0, "stale": 0, "duplicates": 0, "unbuildable": 0}


@pytest.mark.parametrize(
    ("summary", "code"),
    [
        ({**CLEAN, "stale": 1, "clean": False}, 1),  # drift
        ({**CLEAN, "checked": ROWS - 1}, 0),  # not every row checked
        ({**CLEAN, "clean": False}, 0),  # not clean by its own word
        (CLEAN, 1),  # a failing exit
    ],
)
def test_verify_that_is_not_clean_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, summary: dict[str, Any], code: int
) -> None:
    fake_cli(monkeypatch, summary, code)
    with pytest.raises(RuntimeError, match="not clean"):
        verify_bench.verify_clean(tmp_path / "pipeline.yaml", ROWS, "of the index")


@pytest.mark.parametrize(
    "summary",
    [
        {"status": "FAILED", "indexed": ROWS, "failed": 0},
        {"status": "COMPLETED", "indexed": ROWS - 1, "failed": 0},
        {"status": "COMPLETED", "indexed": ROWS, "failed": 1},
    ],
)
def test_reindex_that_did_not_index_every_row_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, summary: dict[str, Any]
) -> None:
    fake_cli(monkeypatch, summary)
    with pytest.raises(RuntimeError, match="did not index"):
        verify_bench.reindex_all(tmp_path / "pipeline.yaml", ROWS)
