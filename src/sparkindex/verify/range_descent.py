"""A range whose checksums differ, compared key by key: only the documents that differ are built.

The range's figures said *that* it differs, not where. Both sides then list the range's keys with
each document's check, still without sending a document:

* the index: every sort key of the range with how many documents hold it and their checks
  (:meth:`~sparkindex.targets.reader.TargetReader.key_checks`, the engine's aggregation);
* the source: each row's key and its document's check, written and hashed by PostgreSQL
  (:meth:`~sparkindex.documents.builder.DocumentBuilder.database_checks`), or, where the database
  cannot, the range's documents built here (whose checks are then at hand).

A key whose one document carries the source's check is clean. Every other key of the source (no
copy in the index, two copies, another check, a row only Python can write) is built by key and
compared by id with the page comparison (:func:`~sparkindex.verify.page_compare.compare_page`),
which classifies it (missing, stale, duplicate, unbuildable) and, with repair, rewrites it. A key
only the index holds is scanned on its own (:func:`~sparkindex.verify.index_range.scan_for_extra`):
extra, or with ``deletes: soft`` a tombstone, and with repair removed. So a 1 % drift costs
building about 1 % of the documents, not the whole range.

Extra documents found here are counted among the index's copies the source side accounted for
(``matched``), as :func:`~sparkindex.verify.ranges._gone` does, so the verifier's count of extra
documents does not send the index side to look for them again.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkindex.checksums import KeyCheck
from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, Key
from sparkindex.errors import DocumentError
from sparkindex.keys import load_key, sort_key
from sparkindex.retry import retry_transient
from sparkindex.sources.base import KeyRange
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.index_range import scan_for_extra
from sparkindex.verify.page_compare import compare_page, index_hashes
from sparkindex.verify.range_checksums import SourceFigure, pages
from sparkindex.verify.range_repair import RangeRepair
from sparkindex.verify.range_task import RangeTask, Resources, TaskOptions


def descend(res: Resources, task: RangeTask, options: TaskOptions, source: SourceFigure | None = None) -> RangeSummary:
    """Compare a differing range key by key; build and compare by id only the keys that differ.
    *source*: what the figures' step read of the range (its pages, or its rows' checks), if any."""
    assert task.index is not None
    index, bounds = task.index, (task.lo, task.hi)
    summary = RangeSummary(task.alias, "source", ranges_compared=1, ranges_descended=1, ranges_by_key=1)
    fixer = RangeRepair(res, task, options) if options.repair else None
    held = {
        k.sort_key: k
        for k in retry_transient(
            lambda: list(res.target.key_checks(index, bounds)),
            f"the checks of a range of {index}",
            options.retries,
            options.backoff(),
        )
    }
    builder = res.builder(task.alias)
    rng = KeyRange(load_key(task.after), load_key(task.upto))
    table = builder.plan.table.name
    built = None if source is None else source.built
    rows = None if source is None else source.checks
    if built is None and rows is None:
        rows = retry_transient(
            lambda: builder.database_checks(rng), f"the checks of {table}", options.retries, options.backoff()
        )
    others: dict[str, str] = {}  # keys under which the index holds a document of another id: their row's id
    unbuilt: set[str] = set()  # ids of the range's rows that cannot be built
    if rows is not None:
        differing: dict[str, tuple[Key, KeyCheck | None]] = {}
        for key, check in rows:
            at = sort_key(key)
            held_here = held.pop(at, None)
            if not _clean(held_here, check, summary):
                differing[at] = (key, held_here)
        docs, failures = _by_keys(builder, [key for key, _ in differing.values()], options)
        unbuilt.update(f.doc_id for f in failures)
        others |= _compare(res, index, docs, failures, {k: h for k, (_, h) in differing.items()}, summary, fixer)
    else:
        for page in built if built is not None else pages(builder, rng, options):
            unequal: list[BuiltDocument] = []
            under: dict[str, KeyCheck | None] = {}
            for d in page.docs:
                held_here = held.pop(d.sort_key or "", None)
                if not _clean(held_here, d.check, summary):
                    unequal.append(d)
                    under[d.sort_key or ""] = held_here
            unbuilt.update(f.doc_id for f in page.failures)
            others |= _compare(res, index, unequal, page.failures, under, summary, fixer)
    # keys the index holds and no row of the range does: extra documents or tombstones (or a copy
    # of a row that cannot be built, which the page comparison counted already: the source has
    # it); and keys whose documents are not all copies of the row's id. A copy of a live id under
    # a key not its own is counted as foreign: the verifier compares the alias again by id
    before = summary.extra
    owners: dict[str, str | None] = {**dict.fromkeys(held), **others}

    lookup = res.lookup(task.alias)

    def own(at: str, doc_id: str) -> bool:
        """Whether *doc_id*'s copy belongs under key *at*: the row there, a row that cannot be
        built (its old copy stays), or a root row whose own key it is (inserted since the range
        was read)."""
        if owners.get(at) == doc_id or doc_id in unbuilt:
            return True
        key = None if lookup.child_of(doc_id) is not None else lookup.root_key(doc_id)
        return key is not None and sort_key(key) == at

    scan_for_extra(res, task, [(k, k + "0") for k in sorted(owners)], summary, fixer, own)
    summary.matched += summary.extra - before + summary.foreign  # copies of ids, counted: not extra
    if fixer is not None:
        fixer.finish()
    return summary


def _compare(
    res: Resources,
    index: str,
    docs: Sequence[BuiltDocument],
    failures: Sequence[DocumentError],
    held: dict[str, KeyCheck | None],
    summary: RangeSummary,
    fixer: RangeRepair | None,
) -> dict[str, str]:
    """Compare the differing documents by id; return the sort keys under which the index holds
    more documents than copies of the document's own id (a document of another id that took
    its key: the extra-document scan must read that key too), each with that own id."""
    ids = [d.id for d in docs] + [f.doc_id for f in failures]
    found = index_hashes(res.target, index, ids) if ids else {}
    compare_page(res.target, index, docs, failures, summary, fixer, found)
    return {
        d.sort_key: d.id
        for d in docs
        if d.sort_key is not None and (h := held.get(d.sort_key)) is not None and h.docs > len(found.get(d.id, ()))
    }


def _clean(held: KeyCheck | None, check: int | None, summary: RangeSummary) -> bool:
    """Whether the index holds exactly one document under the key, carrying *check*; counted."""
    if check is None or held is None or held.check != check:
        return False
    summary.checked += 1
    summary.matched += 1
    return True


def _by_keys(
    builder: DocumentBuilder, keys: Sequence[Key], options: TaskOptions
) -> tuple[list[BuiltDocument], list[DocumentError]]:
    """The documents of *keys*, built as a page builds them (rows deleted meanwhile are left out:
    their copies, if any, are extra and the verifier's counts find them)."""
    if not keys:
        return [], []
    docs, failures, _gone = retry_transient(
        lambda: builder.by_keys(list(keys)),
        f"documents of {builder.plan.table.name} by key",
        options.retries,
        options.backoff(),
    )
    return docs, failures
