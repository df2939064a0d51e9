"""One verify task: compare one key range of the source, or of the index, and optionally fix it.

Engine-neutral, like the partition worker: a Spark task (:mod:`sparkindex.verify.spark_tasks`)
and the in-process runner both call :func:`run_range_task` with what a worker process holds
(source, target, store, builders). See :mod:`sparkindex.verify.verifier` for the design.

* Source side: where the alias is compared by checksum (:mod:`sparkindex.verify.range_checksums`),
  the range's figures are compared first and a range whose figures agree is done; one that
  differs is compared key by key (:mod:`sparkindex.verify.range_descent`). Otherwise the range's
  documents are built page by page with the reindex's own builder, and the index's hashes are
  fetched *by those ids* (:mod:`sparkindex.verify.page_compare`), so both sides are read once per
  range and the index is never scanned.
* Index side: the index's documents of one sort-key range are scanned for extra documents
  (:mod:`sparkindex.verify.index_range`).

With a read replica (``source.read_url``) the ranges read the replica, and every id found
drifted there is read again from the primary by key before it counts or is fixed
(:mod:`sparkindex.verify.primary_check`): a replica behind a live sync must not undo its writes.
With repair, a task writes its own fixes as it goes (:mod:`sparkindex.verify.range_repair`).
"""

from __future__ import annotations

import time

from sparkindex.keys import load_key
from sparkindex.sources.base import KeyRange
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.index_range import check_index_range
from sparkindex.verify.page_compare import compare_page, index_hashes
from sparkindex.verify.primary_check import drifted, recheck
from sparkindex.verify.range_checksums import compare_checksums, pages
from sparkindex.verify.range_descent import descend
from sparkindex.verify.range_repair import RangeRepair
from sparkindex.verify.range_task import RangeTask, Resources, TaskOptions


def run_range_task(res: Resources, task: RangeTask, options: TaskOptions) -> RangeSummary:
    started = time.monotonic()
    if task.side == "source":
        summary = check_source_range(res, task, options)
    elif task.side == "index":
        summary = check_index_range(res, task, options)
    else:
        raise ValueError(f"unknown verify side {task.side!r}")
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


# -- source side ---------------------------------------------------------------------------------------
def check_source_range(res: Resources, task: RangeTask, options: TaskOptions) -> RangeSummary:
    """Compare one source range; by its checksums first when the task says so, and document by
    document only when they differ (the range is then counted as descended)."""
    if task.checksums and task.index is not None:
        clean, source = compare_checksums(res, task, options)
        if clean is not None:
            return clean
        if res.primary_builder(task.alias) is None and res.target.lists_key_checks:
            return descend(res, task, options, source)
        # over a read replica every drifted id is asked again of the primary, and a target that
        # cannot list its keys' checks says nothing finer: compared by id
        summary = compare_documents(res, task, options)
        summary.ranges_compared += 1
        summary.ranges_descended += 1
        return summary
    return compare_documents(res, task, options)


def compare_documents(res: Resources, task: RangeTask, options: TaskOptions) -> RangeSummary:
    """Build the range's documents and look each id's copies up in the index."""
    builder = res.builder(task.alias)
    summary = RangeSummary(task.alias, "source")
    fixer = RangeRepair(res, task, options) if options.repair and task.index is not None else None
    rng = KeyRange(load_key(task.after), load_key(task.upto))
    primary = res.primary_builder(task.alias) if task.index is not None else None
    for page in pages(builder, rng, options):
        if primary is None or task.index is None:
            compare_page(res.target, task.index, page.docs, page.failures, summary, fixer)
            continue
        docs, failures = page.docs, page.failures
        found = index_hashes(res.target, task.index, [d.id for d in docs] + [f.doc_id for f in failures])
        suspects = drifted(docs, failures, found)
        if suspects:  # read on a replica: what counts, and is written, is what the primary says
            lookup = res.primary_lookup(task.alias)
            assert lookup is not None
            now = recheck(res.target, task.index, primary, lookup, suspects, docs, failures, found)
            docs, failures = now.docs, now.failures
            _gone(summary, now.gone, fixer)
        compare_page(res.target, task.index, docs, failures, summary, fixer, found)
    if fixer is not None:
        fixer.finish()
    return summary


def _gone(summary: RangeSummary, gone: dict[str, int], fixer: RangeRepair | None) -> None:
    """Rows the replica still has and the primary no longer does, whose documents the index
    still holds: extra (counted as matched copies, so the index-side pass does not look for
    them again), and with repair removed as a sync removes them."""
    for doc_id, live in gone.items():
        summary.matched += live
        summary.extra += live
        summary.note_sample("extra", doc_id)
    if fixer is not None and gone:
        fixer.delete(summary, list(gone))


__all__ = ["RangeRepair", "RangeTask", "Resources", "TaskOptions", "run_range_task"]
