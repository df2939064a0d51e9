"""The bulk latency histogram: fixed buckets that add up across partitions and processes."""

from __future__ import annotations

import orjson

from sparkindex.coordination.latency import BUCKETS, LatencyHistogram


def test_observations_land_in_their_bucket_and_sum() -> None:
    h = LatencyHistogram()
    for seconds in (0.001, 0.005, 0.0051, 0.3, 45.0):
        h.observe(seconds)
    cumulative = dict(h.cumulative())
    assert cumulative["0.005"] == 2, "a bound is inclusive (Prometheus le)"
    assert cumulative["0.01"] == 3 and cumulative["0.5"] == 4 and cumulative["30.0"] == 4
    assert cumulative["+Inf"] == h.count == 5
    assert abs(h.total_s - 45.3111) < 1e-9


def test_histograms_merge_and_survive_the_store() -> None:
    a, b = LatencyHistogram(), LatencyHistogram()
    a.observe(0.02)
    b.observe(0.02)
    b.observe(2.0)
    a.merge(LatencyHistogram.from_json(b.to_json()))
    assert dict(a.cumulative())["0.025"] == 2 and a.count == 3


def test_a_foreign_or_missing_layout_starts_afresh() -> None:
    assert LatencyHistogram.from_json(None).count == 0
    other = orjson.dumps({"b": [1.0], "c": [4, 2], "s": 3.0}).decode()
    assert LatencyHistogram.from_json(other).count == 0
    assert len(LatencyHistogram().counts) == len(BUCKETS) + 1
