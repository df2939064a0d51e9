"""bench/claims_scale.py at a tiny size, through PgBouncer and directly, so the line cannot rot.

Why: the cluster-scale model in docs/deploy.md is built on this line's figures. A run that lost
or repeated a partition, counted claims it did not make, or timed nothing would feed the model
numbers that mean nothing, and the line is too slow to run in the suite at its real sizes.
Six partitions per executor: past psycopg's threshold of five runs before it prepares a
statement on the server, which PgBouncer's transaction pooling cannot carry.
"""

from __future__ import annotations

import pytest
from bench.claims_scale import bench_claims_scale

SIZES = (4, 8)
PER_EXECUTOR = 6


@pytest.mark.postgres
def test_every_partition_is_claimed_and_completed_once_on_both_paths(services: dict[str, str]) -> None:
    lines = bench_claims_scale(SIZES, PER_EXECUTOR, processes=2, durable=False)  # no ALTER SYSTEM beside other tests
    assert [(line["executors"], line["path"]) for line in lines] == [
        (size, path) for size in SIZES for path in ("direct", "pgbouncer")
    ]
    for line in lines:
        assert "not_run" not in line, line
        want = line["executors"] * PER_EXECUTOR
        assert line["partitions"] == line["claims"] == line["completed_once"] == want, line
        assert line["claims_per_s"] > 0 and line["seconds"] > 0, line
        assert 0 < line["claim_ms_p50"] <= line["claim_ms_p99"], line
        assert 0 < line["cycle_ms_p50"] <= line["cycle_ms_p99"], line
        assert line["claim_ms_p50"] <= line["cycle_ms_p50"], line  # the claim is part of its cycle
        assert line["store_cpu_ms_per_claim"] >= 0 and line["client_cpu_ms_per_claim"] > 0, line
        if line["path"] == "pgbouncer":
            assert line["pgbouncer_cpu_ms_per_claim"] >= 0 and line["ratio_claims_per_s_vs_direct"] > 0, line
        else:
            assert line["pgbouncer_cpu_ms_per_claim"] is None, line
