"""Comparing a key range by one figure per side before any document (see :mod:`sparkindex.checksums`).

Anti-entropy, as replicated stores do it: each side sums its documents' checks over the range,
and only a range whose figures differ is compared document by document
(:func:`sparkindex.verify.ranges.check_source_range`). A clean index costs a statement per range
on the source and an aggregation per range on the index; neither side sends a document.

* **The source's figure.** Where the database writes each document's canonical JSON itself
  (PostgreSQL's in-database builder), it also hashes and sums them
  (:meth:`~sparkindex.documents.builder.DocumentBuilder.database_checksum`): three numbers cross the
  wire. Elsewhere (SQLite, MariaDB, a transform, join children, a value PostgreSQL cannot write
  canonically) the range's documents are built here with the reindex's builder and their checks
  summed; the index is not asked for a single id. A row that cannot be built makes the range
  differ, so the comparison by id reports it.
* **The index's figure.** :meth:`~sparkindex.targets.reader.TargetReader.range_checksums`: the
  engine's own aggregation over the stored check fields of the range's sort keys.

The two sides must cut their ranges alike: the source's ranges are the reindex's partitions, in
the database's order of the key; the index's are sort-key ranges, in byte order
(:func:`sparkindex.keys.sort_key`). They hold the same documents only where the two orders agree:
integer keys, and text keys compared byte by byte (SQLite's default ``BINARY``).
:func:`checksum_path` says when they do not (an ICU or case-insensitive collation, say), and the
alias is then compared document by document, as before, with the reason in the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import sqlalchemy as sa

from sparkindex.checksums import RangeChecksum
from sparkindex.documents.builder import DocumentBuilder, Key, Page
from sparkindex.documents.plan import IndexPlan
from sparkindex.keys import load_key, sort_key
from sparkindex.retry import retry_transient
from sparkindex.sources.base import KeyRange, Source
from sparkindex.targets.reader import TargetReader
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.range_task import RangeTask, Resources, TaskOptions

#: how ``verify --json`` names the two ways an alias is compared
CHECKSUMS = "checksums"
DOCUMENTS = "documents"

#: dialects whose text keys sort byte by byte unless a column says otherwise (SQLite's BINARY)
_BINARY_TEXT = {"sqlite": frozenset({None, "BINARY"})}


def checksum_path(source: Source, target: TargetReader, plan: IndexPlan, index: str | None) -> str | None:
    """None when *plan*'s alias can be compared range by range by checksum; else why not."""
    if index is None:
        return "the alias points at no index"
    if source.dialect_name == "sparkindex-index":
        return "the source is an index, whose documents are copied, not built"
    if not target.stores_checks(index):
        return (
            f"index {index!r} stores no range checks (it was built by an earlier sparkindex): "
            "reindex it to compare by checksum"
        )
    composite = len(plan.id_columns) > 1
    for name in plan.id_columns:
        column = plan.rows.columns[name]
        # a NULL key is read by no key range on either side; a NULL part of a composite key
        # sorts first in the index and last on PostgreSQL
        if composite and column.nullable and name not in plan.rows.primary_key:
            return f"key column {name!r} may be NULL, which the database and the index may sort differently"
        kind = column.type
        if isinstance(kind, sa.Integer):
            continue
        if isinstance(kind, sa.String):
            binary = _BINARY_TEXT.get(source.dialect_name, frozenset())
            if kind.collation in binary:
                continue
            return (
                f"key column {name!r} is text, which {source.dialect_name} orders by its collation and the "
                "index byte by byte: their key ranges hold different documents"
            )
        return f"key column {name!r} is of type {kind}, whose order in the index may differ from the database's"
    return None


def index_bounds(after: str | None, upto: str | None) -> tuple[str | None, str | None]:
    """The sort-key range ``[lo, hi)`` holding the same documents as the source range
    ``(after, upto]`` (keys as stored JSON), join children with their parents: sort keys are hex,
    and no root key extends another (the encoding is prefix-free), so ``(a, b]`` is
    ``[a + "g", b + "g")``."""
    lo, hi = load_key(after), load_key(upto)
    return (None if lo is None else sort_key(lo) + _ABOVE, None if hi is None else sort_key(hi) + _ABOVE)


#: sorts above every hex digit: ``k + "g"`` is above ``k`` and every key that extends it (a join
#: child's sort key is its parent's followed by its own), below every other key above ``k``
_ABOVE = "g"


def pages(builder: DocumentBuilder, rng: KeyRange, options: TaskOptions) -> Iterator[Page]:
    """The range's documents, page by page, each page retried on transient errors."""
    page_size = builder.plan.config.page_size
    after = None
    while True:
        page = retry_transient(
            lambda after=after: builder.page(rng, after, page_size),  # type: ignore[misc]
            f"reading {builder.plan.table.name} after {after}",
            options.retries,
            options.backoff(),
        )
        yield page
        if page.rows < page_size:
            return
        after = page.last_key


@dataclass
class SourceFigure:
    """The source's side of a range: its figure (None when a row of it cannot be built, or holds
    a value only Python writes canonically: the range then differs, and the comparison key by key
    reports the row), and what was read to make it, so that a range that differs is compared key
    by key without building it a second time: the range's pages, when the workers built them
    (memory: one range's documents, as long as the task runs), or each row's key and check, when
    the server wrote them."""

    figure: RangeChecksum | None
    built: list[Page] | None = None
    checks: list[tuple[Key, int | None]] | None = None


def source_checksum(builder: DocumentBuilder, rng: KeyRange, options: TaskOptions) -> SourceFigure:
    """The source's figure for *rng*. Where the server writes the documents, a verify asks it for
    the sum alone (three numbers cross the wire; a range that differs is asked again, row by row);
    a repair, which expects drift, asks for each row's check and sums them here, so that each range
    is built by the server once whether it differs or not."""
    table = builder.plan.table.name
    if options.repair:
        checks = retry_transient(
            lambda: builder.database_checks(rng), f"the checks of {table}", options.retries, options.backoff()
        )
        if checks is not None:
            if any(check is None for _, check in checks):
                return SourceFigure(None, checks=checks)
            return SourceFigure(RangeChecksum.of_checks([c for _, c in checks if c is not None]), checks=checks)
    else:
        figure = retry_transient(
            lambda: builder.database_checksum(rng), f"a checksum of {table}", options.retries, options.backoff()
        )
        if figure is not None:
            return SourceFigure(figure)
    built = list(pages(builder, rng, options))
    if any(page.failures or any(d.check is None for d in page.docs) for page in built):
        return SourceFigure(None, built=built)
    figure = RangeChecksum()
    for page in built:
        figure += RangeChecksum.of_checks([d.check for d in page.docs if d.check is not None])
    return SourceFigure(figure, built=built)


def index_checksum(target: TargetReader, task: RangeTask, options: TaskOptions) -> RangeChecksum:
    assert task.index is not None
    index, bounds = task.index, (task.lo, task.hi)
    [figure] = retry_transient(
        lambda: target.range_checksums(index, [bounds]), f"a checksum of {index}", options.retries, options.backoff()
    )
    return figure


def compare_checksums(
    res: Resources, task: RangeTask, options: TaskOptions
) -> tuple[RangeSummary | None, SourceFigure]:
    """A clean range's summary when both sides' figures agree, else None (the range must be
    compared key by key); and the source's side, with what was read to make its figure."""
    index_figure = index_checksum(res.target, task, options)
    builder = res.builder(task.alias)
    if index_figure.unchecked and builder.plan.config.deletes != "soft":
        # a document without a check may be a second copy the figure cannot see (with soft
        # deletes they are tombstones, which the verifier counts and tells apart)
        return None, SourceFigure(None)
    rng = KeyRange(load_key(task.after), load_key(task.upto))
    source = source_checksum(builder, rng, options)
    if source.figure is None or not source.figure.matches(index_figure):
        return None, source
    n = source.figure.count
    return RangeSummary(task.alias, "source", checked=n, matched=n, ranges_compared=1, ranges_matched=1), source
