"""Bulk writing with per-item results: retry only the transient failures, with capped backoff.

Modelled on ``streaming_bulk`` in elasticsearch-py: a whole-request transient failure retries the
request; item-level transient failures retry just those items (the same id may appear twice, as
a delete and a later index, so items are matched to results by position); permanent item failures are
returned for the dead-letter store. Nothing here knows about Spark or partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sparkindex.errors import TransientError
from sparkindex.retry import Backoff
from sparkindex.targets.base import BulkItem, Target, WriteMark

log = logging.getLogger(__name__)


@dataclass
class BulkOutcome:
    success: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (doc_id, error_class, message)
    #: with ``unsynced``: where each request landed; durable only after a sync to the last of them
    marks: list[WriteMark] = field(default_factory=list)
    #: how long each request took, failed ones included (bulk latency for the metrics)
    latencies: list[float] = field(default_factory=list)


def bulk_with_retries(
    target: Target,
    index: str,
    items: Sequence[BulkItem],
    retries: int,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
    unsynced: bool = False,
    guard: Callable[[], None] | None = None,
) -> BulkOutcome:
    """Write *items*; raise :class:`TransientError` only when retries are exhausted for the request.

    *unsynced*: apply without waiting for durability (:meth:`Target.bulk_unsynced`); the caller
    syncs to ``outcome.marks`` before it treats the items as written. *guard* is called before
    every request, the first and each retry, and raises to stop writing (a partition worker's
    lease check: a retry must not land after another worker took the partition over).
    """
    outcome = BulkOutcome()
    todo = list(items)
    attempt = 0
    while todo:
        if guard is not None:
            guard()
        started = time.monotonic()
        try:
            if unsynced:
                results, mark = target.bulk_unsynced(index, todo)
                if mark is not None:
                    outcome.marks.append(mark)
            else:
                results = target.bulk(index, todo)
        except TransientError as exc:
            outcome.latencies.append(time.monotonic() - started)
            if attempt >= retries:
                raise
            attempt += 1
            delay = backoff.next_delay()
            log.warning(
                "bulk of %d to %s failed: %s; retry %d/%d in %.2fs", len(todo), index, exc, attempt, retries, delay
            )
            sleep(delay)
            continue
        outcome.latencies.append(time.monotonic() - started)
        retry: list[BulkItem] = []
        for item, res in zip(todo, results, strict=True):  # one result per item, in order
            if res.ok:
                outcome.success += 1
            elif res.transient and attempt < retries:
                retry.append(item)
            else:
                outcome.failures.append((res.id, res.error_class or "BulkItemError", res.error or "rejected"))
        todo = retry
        if todo:
            attempt += 1
            sleep(backoff.next_delay())
    return outcome
