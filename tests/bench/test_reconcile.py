"""bench/reconcile.py at a tiny size from PostgreSQL (the SQLite line shares every step but the
loading), so the line cannot rot; CI's time is why one source.

Why: the line is the proof (or disproof) that a sync healing a gap after 1 % drift is several
times faster than a full reindex. It means something only if the sync really reconciled exactly
the planted drift, through polling change capture on either source, and left a clean index
behind; speed is not asserted here (2,000 rows on a shared machine).
"""

from __future__ import annotations

from typing import Any

import bench.reconcile as reconcile_bench
import pytest

ROWS = 2000
PLANTED = {"missing": 2, "stale": 20, "extra": 2, "duplicates": 0}  # 0.1 %, 1 %, 0.1 % of 2,000
RANGE_KEYS = {"source", "index", "compared", "matched", "descended"}

pytestmark = pytest.mark.slow


def check_line(line: dict[str, Any], source: str) -> None:
    assert line["bench"] == "reconcile" and line["source"] == source and line["rows"] == ROWS, line
    assert "error" not in line, line
    assert line["reconciled"] == PLANTED, line
    assert line["verify_checked"] == ROWS - PLANTED["extra"] + PLANTED["missing"], line
    for key in ("seconds", "reconcile_step_s", "reindex_seconds", "reindex_job_s", "ratio", "job_ratio"):
        assert isinstance(line[key], float) and line[key] > 0, (key, line)
    assert line["reconcile_step_s"] < line["seconds"], line  # the repair is part of the sync
    assert abs(line["ratio"] - line["reindex_seconds"] / line["seconds"]) < 0.01, line
    aim = reconcile_bench.AIM[source]
    assert line["aim"] == aim and line["aim_met"] == (None if aim is None else line["ratio"] >= aim), line
    assert set(line["verify_path"]) == set(line["verify_ranges"]) == {"products"}, line
    assert line["verify_path"]["products"] in ("checksums", "documents"), line
    ranges = line["verify_ranges"]["products"]
    assert set(ranges) == RANGE_KEYS and ranges["descended"] == 0, line  # the verify after it is clean


@pytest.mark.postgres
def test_postgres_line(services: dict[str, str]) -> None:
    check_line(reconcile_bench.bench_reconcile("postgres", ROWS), "postgres")
