"""One sort-key range of the index: its documents scanned, and the source asked which ids it still has.

The ids it lacks are extra, except, with ``deletes: soft``, the tombstones (told by their content
hash, no body read): a row that is gone is meant to leave one. With ``deletes: hard`` a tombstone
is extra like any document. Over a read replica, an id the replica lacks is asked of the primary
(inserted since) before it counts. With repair, extra documents are removed as a sync removes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sparkindex.documents.tombstones import is_tombstone
from sparkindex.targets.base import KeyBounds
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.page_compare import LOOKUP_CHUNK
from sparkindex.verify.primary_check import present_on_primary
from sparkindex.verify.range_repair import RangeRepair
from sparkindex.verify.range_task import RangeTask, Resources, TaskOptions


def check_index_range(res: Resources, task: RangeTask, options: TaskOptions) -> RangeSummary:
    summary = RangeSummary(task.alias, "index")
    if task.index is None:
        return summary
    fixer = RangeRepair(res, task, options) if options.repair else None
    scan_for_extra(res, task, [(task.lo, task.hi)], summary, fixer)
    if fixer is not None:
        fixer.finish()
    return summary


def scan_for_extra(
    res: Resources,
    task: RangeTask,
    key_ranges: Iterable[KeyBounds],
    summary: RangeSummary,
    fixer: RangeRepair | None,
    own: Callable[[str, str], bool] | None = None,
) -> None:
    """Scan *key_ranges* of the task's index and count (with *fixer*, remove) what no row builds.

    The ids of every range are asked of the source together, a chunk at a time: a differing
    range's extra keys (:mod:`sparkindex.verify.range_descent`) are many ranges of one key each.
    With *own* (the ranges are single keys; ``own(key, id)``: whether *id*'s copy belongs under
    that key), a copy of an id the source has found under a key not its own is counted as
    ``foreign``.
    """
    assert task.index is not None
    lookup = res.lookup(task.alias)
    soft = res.builder(task.alias).plan.config.deletes == "soft"
    pending: dict[str, list[tuple[str, str | None]]] = {}  # id -> each copy seen: its hash, its key
    primary = res.primary_lookup(task.alias)

    def flush() -> None:
        present = lookup.existing(list(pending))
        # read on a replica: an id it lacks may be a row the primary has (inserted since)
        on_primary = present_on_primary(primary, [d for d in pending if d not in present])
        present |= on_primary
        # copies of rows only the primary has yet: live, not extra, though no replica range counted them
        summary.matched += sum(len(pending[d]) for d in on_primary)
        extra: list[str] = []
        for doc_id, copies in pending.items():
            if doc_id in present:
                if own is not None:
                    summary.foreign += sum(1 for _, at in copies if not own(at or "", doc_id))
                continue
            kept = sum(1 for h, _ in copies if is_tombstone(h)) if soft else 0
            summary.tombstones += kept
            if kept < len(copies):
                summary.extra += len(copies) - kept
                summary.note_sample("extra", doc_id)
                extra.append(doc_id)
        if fixer is not None and extra:
            fixer.delete(summary, extra)
        pending.clear()

    for bounds in key_ranges:
        at = bounds[0] if own is not None else None
        for doc_id, doc_hash in res.target.scan_hashes(task.index, key_range=bounds):
            summary.scanned += 1
            pending.setdefault(doc_id, []).append((doc_hash, at))
            if len(pending) >= LOOKUP_CHUNK:
                flush()
    if pending:
        flush()
