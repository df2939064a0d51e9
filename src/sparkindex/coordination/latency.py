"""Bulk latency as a fixed-bucket histogram, kept per partition in the coordination store.

Executors cannot be scraped, so what ``/metrics`` reports about bulk requests must travel through
the store: each partition attempt counts its bulk requests into these buckets and saves the
histogram with its progress (one more column in the same statement). Fixed buckets make
histograms of different partitions and processes add up, as Prometheus histograms do.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import orjson

#: upper bounds in seconds (Prometheus ``le``); a last, implicit bucket is +Inf
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class LatencyHistogram:
    #: observations per bucket (not cumulative), the last one for +Inf
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total_s: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total_s += seconds

    def merge(self, other: LatencyHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total_s += other.total_s

    def cumulative(self) -> list[tuple[str, int]]:
        """(``le`` bound, observations at or below it), +Inf last, as Prometheus exposes them."""
        out, running = [], 0
        for bound, n in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def to_json(self) -> str:
        return orjson.dumps({"b": list(BUCKETS), "c": self.counts, "s": round(self.total_s, 6)}).decode()

    @classmethod
    def from_json(cls, text: str | None) -> LatencyHistogram:
        """A stored histogram; an empty one for None or one with other buckets (an older layout
        cannot be re-bucketed, and latency is a diagnostic: starting afresh is harmless)."""
        if not text:
            return cls()
        raw = orjson.loads(text)
        if list(raw.get("b", [])) != list(BUCKETS) or len(raw.get("c", [])) != len(BUCKETS) + 1:
            return cls()
        return cls([int(n) for n in raw["c"]], float(raw.get("s", 0.0)))
