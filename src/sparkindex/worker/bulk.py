"""Bulk writing with per-item results: retry only the transient failures, with capped backoff.

Modelled on ``streaming_bulk`` in elasticsearch-py: a whole-request transient failure retries the
request; item-level transient failures retry just those items (the same id may appear twice, as
a delete and a later index, so items are matched to results by position); permanent item failures are
returned for the dead-letter store. Items still rejected as transient after the last retry (429,
503: "not now") are returned with them, or, for callers that can come back later (a partition
worker parks its partition), raised as :class:`ItemsStillTransient`. Nothing here knows about
Spark or partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sparkindex.errors import TransientError
from sparkindex.retry import Backoff
from sparkindex.targets.base import BulkItem, WriteMark
from sparkindex.targets.write_deadline import writes_until
from sparkindex.targets.writer import TargetWriter

log = logging.getLogger(__name__)


class ItemsStillTransient(TransientError):
    """Items the target still rejected as transient after every retry: busy now, not unbuildable,
    so not dead letters. The bulk's other items may have been written."""


@dataclass
class BulkOutcome:
    success: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (doc_id, error_class, message)
    #: with ``unsynced``: where each request landed; durable only after a sync to the last of them
    marks: list[WriteMark] = field(default_factory=list)
    #: how long each request took, failed ones included (bulk latency for the metrics)
    latencies: list[float] = field(default_factory=list)


def bulk_with_retries(
    target: TargetWriter,
    index: str,
    items: Sequence[BulkItem],
    retries: int,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
    unsynced: bool = False,
    guard: Callable[[], None] | None = None,
    raise_transient: bool = False,
    valid_until: Callable[[], float] | None = None,
) -> BulkOutcome:
    """Write *items*; raise :class:`TransientError` only when retries are exhausted for the request.

    *unsynced*: apply without waiting for durability (:meth:`TargetWriter.bulk_unsynced`); the caller
    syncs to ``outcome.marks`` before it treats the items as written. *guard* is called before
    every request, the first and each retry, and raises to stop writing (a partition worker's
    lease check: a retry must not land after another worker took the partition over).
    *raise_transient*: items still rejected as transient after the last retry raise
    :class:`ItemsStillTransient` instead of being returned among the failures. *valid_until*
    (monotonic) bounds every request the target sends for this bulk, chunks and resends
    included (:mod:`sparkindex.targets.write_deadline`): the guard alone runs once per request
    of ours, and one of ours is many of the target's.
    """
    with writes_until(valid_until):
        return _bulk(target, index, items, retries, backoff, sleep, unsynced, guard, raise_transient)


def _bulk(
    target: TargetWriter,
    index: str,
    items: Sequence[BulkItem],
    retries: int,
    backoff: Backoff,
    sleep: Callable[[float], None],
    unsynced: bool,
    guard: Callable[[], None] | None,
    raise_transient: bool,
) -> BulkOutcome:
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
        busy: list[tuple[str, str]] = []
        for item, res in zip(todo, results, strict=True):  # one result per item, in order
            if res.ok:
                outcome.success += 1
            elif res.transient and attempt < retries:
                retry.append(item)
            elif res.transient and raise_transient:
                busy.append((res.id, res.error or "rejected"))
            else:
                outcome.failures.append((res.id, res.error_class or "BulkItemError", res.error or "rejected"))
        if busy:
            first_id, first_error = busy[0]
            raise ItemsStillTransient(
                f"{len(busy)} item(s) of a bulk to {index} still rejected after {retries} retries, "
                f"e.g. id {first_id!r}: {first_error}"
            )
        todo = retry
        if todo:
            attempt += 1
            sleep(backoff.next_delay())
    return outcome
