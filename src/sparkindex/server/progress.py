"""A job's progress in the shape OpenMetadata's search-indexing application reports it, with docs/s
and ETA from the server's samples.

The store holds counts, not speeds. The server samples each live job's processed counts every
tick and derives docs/s over a sliding window: counts move in steps (a partition saves its cursor
after each acknowledged sync), so a window of several seconds smooths them where a two-point
difference would jump between zero and bursts. For a job first seen mid-run, the average since
its start stands in until the window fills. Finished jobs report their average speed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from sparkindex.coordination.records import EntityStats, JobRecord
from sparkindex.coordination.views import PartitionView

WINDOW_S = 12.0
HISTORY_POINTS = 1800  # an hour at one point per 2 s tick; older points are thinned, not dropped
_JOB = ""  # the key of the whole job among its entities


class RateTracker:
    """Samples of processed counts per (job, entity); thread-safe (ticks and requests share it)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        self._history: dict[str, list[tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def observe(self, job_id: str, stats: dict[str, EntityStats], now: float) -> None:
        with self._lock:
            for key, processed in [(_JOB, sum(s.processed for s in stats.values()))] + [
                (entity, s.processed) for entity, s in stats.items()
            ]:
                q = self._samples.setdefault((job_id, key), deque())
                q.append((now, processed))
                while len(q) > 2 and now - q[1][0] >= self.window_s:
                    q.popleft()
            rate = self._rate((job_id, _JOB))
            if rate is not None:
                points = self._history.setdefault(job_id, [])
                points.append((now, rate))
                if len(points) > HISTORY_POINTS:
                    del points[::2]

    def _rate(self, key: tuple[str, str]) -> float | None:
        q = self._samples.get(key)
        if not q or len(q) < 2:
            return None
        (t0, p0), (t1, p1) = q[0], q[-1]
        if t1 - t0 < min(4.0, self.window_s):
            return None
        return max(0.0, (p1 - p0) / (t1 - t0))

    def rate(self, job_id: str, entity: str | None = None) -> float | None:
        with self._lock:
            return self._rate((job_id, entity or _JOB))

    def history(self, job_id: str) -> list[tuple[float, float]]:
        with self._lock:
            return list(self._history.get(job_id, []))

    def forget(self, keep: Iterable[str]) -> None:
        """Drop samples of jobs no longer live (their history stays for the page, bounded)."""
        live = set(keep)
        with self._lock:
            for key in [k for k in self._samples if k[0] not in live]:
                del self._samples[key]
            for job_id in list(self._history)[: max(0, len(self._history) - 50)]:
                if job_id not in live:
                    del self._history[job_id]


def _figures(
    total: int, processed: int, success: int, failed: int, partitions: dict[str, int], rate: float | None
) -> dict[str, Any]:
    remaining = max(total - processed, 0)
    eta = None if not rate else remaining / rate
    return {
        "totalRecords": total,
        "processedRecords": processed,
        "successRecords": success,
        "failedRecords": failed,
        "docsPerSecond": None if rate is None else round(rate, 1),
        "etaSeconds": None if eta is None else round(eta, 1),
        "partitions": dict(sorted(partitions.items())),
    }


def job_progress(
    job: JobRecord, stats: dict[str, EntityStats], tracker: RateTracker, dead_letters: int, now: float | None = None
) -> dict[str, Any]:
    """OpenMetadata's reindex progress, ``{"status", "stats": {"jobStats", "entityStats"}}``, with
    processed counts, docs/s, ETA and partitions by state added at both levels."""
    now = time.time() if now is None else now
    finished = job.completed_at is not None and str(job.status) not in ("RUNNING", "READY", "STOPPING")
    elapsed = None
    if job.started_at is not None:
        elapsed = max((job.completed_at if finished and job.completed_at else now) - job.started_at, 1e-3)

    def rate_of(key: str | None, processed: int) -> float | None:
        live = None if finished else tracker.rate(job.id, key)
        if live is not None:
            return live
        return processed / elapsed if elapsed else None

    partitions: dict[str, int] = {}
    for s in stats.values():
        for state, n in s.partitions.items():
            partitions[state] = partitions.get(state, 0) + n
    total = sum(s.total for s in stats.values())
    processed = sum(s.processed for s in stats.values())
    job_stats = _figures(
        max(total, processed),
        processed,
        sum(s.success for s in stats.values()),
        sum(s.failed for s in stats.values()),
        partitions,
        rate_of(None, processed),
    )
    if finished:
        job_stats["etaSeconds"] = 0.0
    entity_stats = {}
    for entity, s in stats.items():
        figures = _figures(max(s.total, s.processed), s.processed, s.success, s.failed, s.partitions, None)
        rate = rate_of(entity, s.processed)
        figures["docsPerSecond"] = None if rate is None else round(rate, 1)
        remaining = figures["totalRecords"] - s.processed
        figures["etaSeconds"] = 0.0 if finished or s.done else (round(remaining / rate, 1) if rate else None)
        entity_stats[entity] = figures
    return {
        "jobId": job.id,
        "aliases": list(job.aliases),
        "indexes": job.targets,
        "status": str(job.status),
        "createdAt": job.created_at,
        "startedAt": job.started_at,
        "completedAt": job.completed_at,
        "updatedAt": job.updated_at,
        "elapsedSeconds": None if elapsed is None else round(elapsed, 1),
        "error": job.error_message,
        "deadLetters": dead_letters,
        "stats": {"jobStats": job_stats, "entityStats": entity_stats},
    }


def reconstructed_history(partitions: list[PartitionView], bins: int = 60) -> list[tuple[float, float]]:
    """Docs/s over a job the server did not watch, from its partitions' start and end times: each
    partition's documents spread evenly over the time it ran (an approximation, labelled so)."""
    spans = [
        (p.started_at, p.completed_at or p.last_heartbeat or p.started_at, p.processed)
        for p in partitions
        if p.started_at is not None and p.processed > 0
    ]
    if not spans:
        return []
    start = min(s for s, _, _ in spans)
    end = max(e for _, e, _ in spans)
    if end <= start:
        return []
    width = (end - start) / bins
    docs = [0.0] * bins
    for s, e, n in spans:
        e = max(e, s + 1e-6)
        for i in range(int((s - start) / width), min(bins, int((e - start) / width) + 1)):
            lo, hi = start + i * width, start + (i + 1) * width
            overlap = min(hi, e) - max(lo, s)
            if overlap > 0:
                docs[i] += n * overlap / (e - s)
    return [(start + (i + 0.5) * width, d / width) for i, d in enumerate(docs)]
