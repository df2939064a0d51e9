"""One verify task: compare one key range of the source, or of the index, and optionally fix it.

Engine-neutral, like the partition worker: a Spark task (:mod:`sparkindex.verify.spark_tasks`)
and the in-process runner both call :func:`run_range_task` with what a worker process holds
(source, target, store, builders). See :mod:`sparkindex.verify.verifier` for the design.

* Source side: where the alias is compared by checksum (:mod:`sparkindex.verify.range_checksums`),
  the range's figures are compared first and a range whose figures agree is done. Otherwise (and
  for a range that differs) the range's documents are built page by page with the reindex's own
  builder, and the index's hashes are fetched *by those ids*, so both sides are read once per
  range and the index is never scanned. An id the index returns twice is a duplicate.
* Index side: the index's documents of one sort-key range are scanned, and the source is asked
  which of their ids it still has (:class:`SourceLookup`); the others are extra, except, with
  ``deletes: soft``, the tombstones (told by their content hash, no body read): a row that is
  gone is meant to leave one. With ``deletes: hard`` a tombstone is extra like any document.

With a read replica (``source.read_url``) the ranges read the replica, and every id found
drifted there is read again from the primary by key before it counts or is fixed
(:mod:`sparkindex.verify.primary_check`): a replica behind a live sync must not undo its writes.

With repair, a task writes its own fixes as it goes: missing and stale documents are indexed
from the documents it just built (the source as of this read, the primary's for drifted ids),
duplicates are deleted and then indexed once, extra documents removed as a sync removes them
(deleted, or with ``deletes: soft`` turned into tombstones; :mod:`sparkindex.documents.tombstones`).
On a target that routes,
deletes carry the routing each copy is stored with, read back from the index whatever the plan
says now, and a rewritten document's copies under another routing are deleted first. Removed root
documents' transform cache entries are forgotten. Writes go
through the bulk retry loop and count as durable when acknowledged; rejected ones are
dead-lettered under the repair run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sparkindex.documents.builder import BuiltDocument
from sparkindex.documents.join import parent_prefixes
from sparkindex.documents.tombstones import Removal, delete_copies, is_tombstone, moved_copies, root_removals
from sparkindex.errors import DocumentError, WritesLost
from sparkindex.keys import load_key
from sparkindex.sources.base import KeyRange
from sparkindex.targets.base import BulkItem, WriteMark
from sparkindex.targets.reader import TargetReader
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.primary_check import drifted, present_on_primary, recheck
from sparkindex.verify.range_checksums import compare_checksums, pages
from sparkindex.verify.range_task import RangeTask, Resources, TaskOptions
from sparkindex.worker.bulk import bulk_with_retries

#: ids per hash lookup or existence query: one request each, small enough for any backend's
#: query-size limits (OpenSearch's default max_terms_count is 65,536)
LOOKUP_CHUNK = 1000
#: the job id dead letters of repair writes are recorded under
REPAIR_JOB = "verify-repair"


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
def index_hashes(target: TargetReader, index: str, ids: Sequence[str]) -> dict[str, list[str]]:
    """id -> the hash of every copy the index holds of it, asked in chunks by id."""
    found: dict[str, list[str]] = {}
    for i in range(0, len(ids), LOOKUP_CHUNK):
        for doc_id, doc_hash in target.scan_hashes(index, ids=ids[i : i + LOOKUP_CHUNK]):
            found.setdefault(doc_id, []).append(doc_hash)
    return found


def check_source_range(res: Resources, task: RangeTask, options: TaskOptions) -> RangeSummary:
    """Compare one source range; by its checksums first when the task says so, and document by
    document only when they differ (the range is then counted as descended)."""
    if task.checksums and task.index is not None:
        clean = compare_checksums(res, task, options)
        if clean is not None:
            return clean
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


def compare_page(
    target: TargetReader,
    index: str | None,
    docs: Sequence[BuiltDocument],
    failures: Sequence[DocumentError],
    summary: RangeSummary,
    fixer: RangeRepair | None = None,
    found: dict[str, list[str]] | None = None,
) -> None:
    """Classify one page's documents against the index's copies of the same ids (*found*: those
    copies, when the caller read them already)."""
    ids = [d.id for d in docs] + [f.doc_id for f in failures]
    if found is None:
        found = index_hashes(target, index, ids) if index is not None and ids else {}
    summary.checked += len(ids)
    duplicated: list[BuiltDocument] = []
    rewrite: list[BuiltDocument] = []
    for doc in docs:
        copies = found.get(doc.id)
        if not copies:
            summary.note("missing", doc.id)
            rewrite.append(doc)
            continue
        summary.matched += len(copies)
        summary.matched_tombstones += sum(1 for h in copies if is_tombstone(h))
        if len(copies) > 1:
            summary.duplicates += len(copies) - 1
            summary.note_sample("duplicates", doc.id)
            duplicated.append(doc)
        if any(h != doc.hash for h in copies):
            summary.note("stale", doc.id)
            if len(copies) == 1:
                rewrite.append(doc)
    for failure in failures:
        # A row that cannot be built: counted as such, and as missing unless the index still
        # holds an older copy of it (then that copy is stale; nothing can replace it).
        summary.note("unbuildable", failure.doc_id)
        copies = found.get(failure.doc_id)
        if copies:
            summary.matched += len(copies)
            summary.matched_tombstones += sum(1 for h in copies if is_tombstone(h))
            summary.note("stale", failure.doc_id)
        else:
            summary.note("missing", failure.doc_id)
    if fixer is not None:
        fixer.fix(summary, duplicated, rewrite)


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


# -- index side ----------------------------------------------------------------------------------------
def check_index_range(res: Resources, task: RangeTask, options: TaskOptions) -> RangeSummary:
    summary = RangeSummary(task.alias, "index")
    if task.index is None:
        return summary
    lookup = res.lookup(task.alias)
    soft = res.builder(task.alias).plan.config.deletes == "soft"
    fixer = RangeRepair(res, task, options) if options.repair else None
    pending: dict[str, list[str]] = {}  # id -> the hash of each copy seen

    primary = res.primary_lookup(task.alias)

    def flush() -> None:
        present = lookup.existing(list(pending))
        # read on a replica: an id it lacks may be a row the primary has (inserted since)
        present |= present_on_primary(primary, [d for d in pending if d not in present])
        extra: list[str] = []
        for doc_id in (d for d in pending if d not in present):
            hashes = pending[doc_id]
            kept = sum(1 for h in hashes if is_tombstone(h)) if soft else 0
            summary.tombstones += kept
            if kept < len(hashes):
                summary.extra += len(hashes) - kept
                summary.note_sample("extra", doc_id)
                extra.append(doc_id)
        if fixer is not None and extra:
            fixer.delete(summary, extra)
        pending.clear()

    for doc_id, doc_hash in res.target.scan_hashes(task.index, key_range=(task.lo, task.hi)):
        summary.scanned += 1
        pending.setdefault(doc_id, []).append(doc_hash)
        if len(pending) >= LOOKUP_CHUNK:
            flush()
    if pending:
        flush()
    if fixer is not None:
        fixer.finish()
    return summary


# -- repair --------------------------------------------------------------------------------------------
class RangeRepair:
    """Writes one task's fixes into the index the alias points at."""

    def __init__(self, res: Resources, task: RangeTask, options: TaskOptions) -> None:
        assert task.index is not None
        self.res = res
        self.alias = task.alias
        plan = res.builder(task.alias).plan
        self.config = plan.config
        #: prefixes of join children's ids (routed to their parents, always deleted)
        self.children = parent_prefixes(plan.joins)
        #: whether the index may hold copies under a routing (whatever the plan says now: a routing
        #: column removed or replaced leaves copies under the old values), asked before deleting
        self.routed = res.target.supports_routing
        #: whether removed root documents' transform cache entries must go (an on_change transform)
        self.cached = self.config.transform is not None and bool(self.config.transform.on_change)
        self.index = task.index
        self.options = options
        self.marks: list[WriteMark] = []

    def _write(self, items: Sequence[BulkItem], count: Callable[[int], None], summary: RangeSummary) -> None:
        if not items:
            return
        o = self.options
        # applied, not yet durable: one sync per range (finish), not a commit per page (measured:
        # about a thousand Tantivy commits for a 1M-document repair, most of its time)
        outcome = bulk_with_retries(self.res.target, self.index, items, o.retries, o.backoff(), unsynced=True)
        self.marks.extend(outcome.marks)
        count(outcome.success)
        if outcome.failures:
            summary.failed += len(outcome.failures)
            self.res.store.dead_letters.add(REPAIR_JOB, self.alias, None, outcome.failures, attempt=o.attempt)

    def fix(self, summary: RangeSummary, duplicated: Sequence[BuiltDocument], rewrite: Sequence[BuiltDocument]) -> None:
        """Delete every copy of duplicated ids, then index them once, with the missing and stale.

        On a target that routes, each copy is deleted with the routing it is stored with (read
        back), and so is a rewritten document's copy under another routing than the one it is
        written with now: its row's routing value changed, a join child moved to another parent,
        or the index's routing column was removed or replaced (the plan no longer knows the old
        values; the index does)."""

        def deleted(n: int) -> None:
            summary.deleted += n

        def indexed(n: int) -> None:
            summary.indexed += n

        target = self.res.target
        if not self.routed:
            deletes = [BulkItem(d.id, op="delete", routing=d.routing) for d in duplicated]
        else:
            deletes = delete_copies(target, self.index, [Removal(d.id) for d in duplicated])
            deletes += moved_copies(target, self.index, [d.bulk_item() for d in rewrite])
        self._write(deletes, deleted, summary)
        self._write([d.bulk_item() for d in [*duplicated, *rewrite]], indexed, summary)

    def finish(self) -> None:
        """Make the range's fixes durable before the task reports them. A writer that restarted
        meanwhile lost some: the task fails (and is retried, or the repair run fails) rather than
        report fixes that are not there."""
        if not self.marks:
            return
        if len({m.epoch for m in self.marks}) > 1:
            raise WritesLost("the target's writer restarted while repairs were unsynced")
        self.res.target.sync(self.index, max(self.marks, key=lambda m: m.generation))
        self.marks.clear()

    def delete(self, summary: RangeSummary, ids: Sequence[str]) -> None:
        """Remove extra documents as a sync would: deleted (with their routing), or with
        ``deletes: soft`` turned into tombstones (unversioned, like every repair write)."""

        def deleted(n: int) -> None:
            summary.deleted += n

        target = self.res.target
        kids = [Removal(i) for i in ids if self.children and i.startswith(self.children)]
        roots = [Removal(i) for i in ids if not (self.children and i.startswith(self.children))]
        removals = root_removals(target, self.index, self.config, roots, stored_routing=self.routed)
        removals += delete_copies(target, self.index, kids)  # join children: always deleted
        self._write(removals, deleted, summary)
        if self.cached and roots:
            self.res.store.transform_cache.forget_ids(self.alias, [r.id for r in roots])


__all__ = ["LOOKUP_CHUNK", "REPAIR_JOB", "RangeTask", "Resources", "TaskOptions", "run_range_task"]
