"""Verification: does the index behind an alias equal the source, document for document?

Kinds of drift: ``missing`` (the source builds it, the index lacks it; rows that cannot be built
count here too, and as ``unbuildable``), ``extra`` (the index holds an id the source does not
build), ``stale`` (both hold it, with different content hashes), ``duplicates`` (copies of an id
beyond the first); ``index_docs`` is what the index itself counts, ``checked`` what the source built.

Design: it runs like the reindex, partitioned by key ranges, and nothing grows with the index on
the driver (tasks return counts and a bounded sample of ids).

0. **Checksums first** (where the alias allows: :func:`checksum_path`). Each source range is first
   compared by one figure per side, the count and summed checks of its documents
   (:mod:`sparkindex.verify.range_checksums`); a range whose figures agree is clean, and only a
   range that differs goes through step 1. The index side of step 2 then reads only the ranges
   that differed (an extra document with a check makes its range differ). The report says which
   path each alias took (``path``, with ``path_reason`` when it is ``documents``) and how many
   ranges were compared, matched and descended into. A copy of a live id under another
   document's sort key (or none) is a copy no figure counts for its id: when a range compared key
   by key finds one, or the whole-index scan cannot place every document, the alias is compared
   a second time by id (``path_reason`` says why).

1. **Source side** (always). The source's key ranges are planned exactly as the reindex plans its
   partitions (:func:`plan_partitions`: boundaries in the database's own collation order). Each
   task builds its range's documents with the reindex's builder and asks the index for the hashes
   of *those ids* (``scan_hashes(ids=...)`` in chunks). That finds missing, stale and duplicate
   documents, and counts ``matched``: the index's copies of ids the source has.
2. **Index side** (only when needed). An extra document is never seen from the source, but it
   can be counted without looking for it: every document the index holds is either a copy of a
   source id or extra, so ``extra = index_docs - matched``. Only when that is above zero does
   verify scan the index for them: the index's own sort-key ranges (``key_splits``, byte order,
   not the collation) are scanned (``scan_hashes(key_range=...)``) and the source is asked which
   of those ids it still has, by key lookups (:class:`SourceLookup`). A clean index (the common
   case, and every run after a repair) therefore costs one read of each side, never a scan of the
   whole index; a drifted one costs one more read of the index, in parallel ranges. Documents
   without a sort key (written before documents stored one) lie in no range: when the ranges
   hold fewer extra documents than the counts show, one task scans the whole index for them.
   When the scan and the counts still disagree (the index changed while verify ran), a note
   says so; the scan's figure is reported.

With ``deletes: soft`` the index also holds tombstones of rows that are gone: no drift, so they
are not extra. They are counted without reading the index (``count_hash_prefix``: a tombstone's
content hash says what it is, :mod:`sparkindex.documents.tombstones`), less those the source side
matched (rows that came back, whose tombstones are stale), and taken out of ``extra_by_count``;
the report says how many there are (``tombstones``). A target that cannot count them leaves them
in the count, and the index-side scan tells them from extra documents by their hashes.

A target that cannot split its keys (``key_splits`` raises) is scanned as one range, with a note.
Verify reads while others may write: a document written meanwhile may show as drift once; run
it again (or ``--repair``, which verifies a second time) to tell drift from motion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from sparkindex.config.job import JobConfig
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.tombstones import TOMBSTONE_HASH_PREFIX
from sparkindex.errors import SparkIndexError
from sparkindex.keys import dump_key
from sparkindex.sources.base import Source
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.targets.reader import TargetReader
from sparkindex.targets.target import Target
from sparkindex.verify.drift import KINDS, SAMPLE, DriftCounts, RangeSummary
from sparkindex.verify.range_checksums import CHECKSUMS, DOCUMENTS, checksum_path, index_bounds
from sparkindex.verify.ranges import RangeTask, TaskOptions

#: Runs range tasks (on Spark, or in this process) and reports how many are done as they finish.
Runner = Callable[[Sequence[RangeTask], TaskOptions, Callable[[int], None]], list[RangeSummary]]


class VerifyProgress(Protocol):
    def phase(self, text: str) -> None: ...

    def ranges(self, label: str, done: int, total: int) -> None: ...


#: what a report counts of its ranges (see :attr:`VerifyReport.ranges`)
RANGE_COUNTS = ("source", "index", "compared", "matched", "descended")


class SilentVerifyProgress:
    def phase(self, text: str) -> None:
        return None

    def ranges(self, label: str, done: int, total: int) -> None:
        return None


@dataclass
class VerifyReport(DriftCounts):
    alias: str
    index: str | None
    index_docs: int = 0
    #: ``index_docs`` minus the index's copies of source ids (and, with ``deletes: soft``, minus
    #: the tombstones of rows that are gone): the extra documents by count
    extra_by_count: int = 0
    #: ``deletes: soft``: the tombstones the index holds for rows that are gone (not drift)
    tombstones: int = 0
    #: ranges read on each side (the index side only runs when documents are extra); of the
    #: source's, how many were compared by checksum, matched, and descended into (compared id by id)
    ranges: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RANGE_COUNTS, 0))
    #: how the alias was compared: ``checksums`` (range figures first) or ``documents`` (id by id)
    path: str = DOCUMENTS
    #: with ``documents``: why the alias could not be compared by checksum
    path_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: with repair: documents indexed, deleted, and rejected (dead-lettered) by this pass
    repaired: dict[str, int] | None = None

    @property
    def clean(self) -> bool:
        return self.missing == self.extra == self.stale == self.duplicates == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- planning ------------------------------------------------------------------------------------------
def source_tasks(
    source: Source,
    plans: dict[str, IndexPlan],
    indexes: dict[str, str | None],
    job: JobConfig,
    by_checksum: frozenset[str] = frozenset(),
) -> list[RangeTask]:
    """The reindex's partitions of every alias, as source-side range tasks; those of the aliases
    in *by_checksum* compared by checksum first, with the sort-key bounds of the same documents."""
    specs = plan_partitions(source, [EntityPlanInput(p.config, p.table, p.id_columns) for p in plans.values()], job)
    tasks = []
    for s in specs:
        after, upto = dump_key(s.range_start), dump_key(s.range_end)
        if s.entity in by_checksum:
            lo, hi = index_bounds(after, upto)
            tasks.append(RangeTask(s.entity, indexes[s.entity], "source", after, upto, lo, hi, checksums=True))
        else:
            tasks.append(RangeTask(s.entity, indexes[s.entity], "source", after, upto))
    return tasks


def index_tasks(target: TargetReader, alias: str, index: str, parts: int, notes: list[str]) -> list[RangeTask]:
    """Sort-key ranges of *index*: about *parts* of them, or one when the target cannot split."""
    return [RangeTask(alias, index, "index", lo=lo, hi=hi) for lo, hi in target.key_ranges(index, parts, notes)]


# -- running -------------------------------------------------------------------------------------------
class Verifier:
    """Verifies (and with ``TaskOptions(repair=True)`` repairs) the aliases of *plans*."""

    def __init__(
        self,
        source: Source,
        target: Target,
        plans: dict[str, IndexPlan],
        runner: Runner,
        job: JobConfig | None = None,
        progress: VerifyProgress | None = None,
    ) -> None:
        self.source = source
        self.target = target
        self.plans = plans
        self.runner = runner
        self.job = job or JobConfig()
        self.progress = progress or SilentVerifyProgress()
        #: per alias, this run's tombstones by count (taken out of ``extra_by_count``)
        self._counted: dict[str, int] = {}
        #: per alias, the tombstones the index held before the source side ran
        self._held: dict[str, int] = {}
        #: per alias compared by checksum, the sort-key ranges the index side may still have to
        #: read: those compared by id (and, with tombstones, those whose figures matched, which
        #: cannot see a document without a check); a range compared key by key was read whole
        self._unread: dict[str, list[tuple[str | None, str | None]]] = {}
        #: per alias with at least one range compared key by key, what those ranges found (extra
        #: documents and tombstones, counted on the source side)
        self._keyed: dict[str, RangeSummary] = {}
        #: per alias compared by checksum whose documents the ranges could not all place (copies
        #: of live ids under another's sort key, or none): why it is compared again by id
        self._again: dict[str, str] = {}
        #: per alias, the unbuildable rows whose older copy the index holds (the last pass's)
        self._unbuildable_held: dict[str, int] = {}

    def _run(self, label: str, tasks: Sequence[RangeTask], options: TaskOptions) -> list[RangeSummary]:
        total = len(tasks)
        self.progress.ranges(label, 0, total)
        return self.runner(tasks, options, lambda done: self.progress.ranges(label, done, total))

    def run(self, options: TaskOptions | None = None) -> list[VerifyReport]:
        """Verify (or repair) every alias; an alias compared by checksum whose index holds copies
        of live documents the key ranges cannot place is then compared again by id."""
        options = options or TaskOptions()
        started = time.monotonic()
        reports = self._pass(list(self.plans), options, {})
        again = dict(self._again)
        if again:
            for alias in again:  # the second pass must read what the first one wrote
                fixed = reports[alias].repaired or {}
                index = reports[alias].index
                if index is not None and fixed.get("indexed", 0) + fixed.get("deleted", 0) > 0:
                    self.target.finish_version(index)
            self.progress.phase(f"comparing {', '.join(sorted(again))} again by id")
            for second in self._pass(list(again), options, again).values():
                held = self._unbuildable_held.get(second.alias, 0)
                reports[second.alias] = _second_pass(reports[second.alias], second, options.repair, held)
        for report in reports.values():
            report.seconds = round(time.monotonic() - started, 3)
        return list(reports.values())

    def _pass(self, aliases: list[str], options: TaskOptions, by_id: dict[str, str]) -> dict[str, VerifyReport]:
        """One verify (or repair) of *aliases*; those in *by_id* compared by id, for the reason given."""
        t = self.target
        self._again = {}
        indexes = {alias: t.alias_target(alias) for alias in aliases}
        reports = {alias: VerifyReport(alias, ix) for alias, ix in indexes.items()}
        for alias, ix in indexes.items():
            report = reports[alias]
            report.index_docs = t.count(ix) if ix is not None else 0  # before any repair writes
            self._held[alias] = self._tombstones_held(report)  # so are tombstones (repair writes some)
            if ix is None:
                report.notes.append(f"alias {alias!r} points at no index: every document is missing")
            report.path_reason = by_id.get(alias) or checksum_path(self.source, t, self.plans[alias], ix)
            report.path = DOCUMENTS if report.path_reason else CHECKSUMS
        label = "repairing" if options.repair else "verifying"
        merged = self._source_side(reports, options, label)
        extra = self._index_side(reports, merged, options, label)
        for alias, report in reports.items():
            merged[alias].merge(extra[alias])
            keyed = self._keyed.get(alias, RangeSummary(alias))
            self._unbuildable_held[alias] = merged[alias].unbuildable_held
            _fill(report, merged[alias], options.repair, self._counted.get(alias, 0), keyed.extra)
            if report.path == CHECKSUMS and merged[alias].foreign:
                self._again[alias] = (
                    f"{merged[alias].foreign:,} copies of documents the source has lie under other documents' "
                    "sort keys, where no range's figure counts them as copies: compared again by id"
                )
        return reports

    def _source_side(
        self, reports: dict[str, VerifyReport], options: TaskOptions, label: str
    ) -> dict[str, RangeSummary]:
        self.progress.phase("planning key ranges")
        indexes = {alias: r.index for alias, r in reports.items()}
        fast = frozenset(a for a, r in reports.items() if r.path == CHECKSUMS)
        plans = {alias: self.plans[alias] for alias in reports}
        tasks = source_tasks(self.source, plans, indexes, self.job, fast)
        merged = {alias: RangeSummary(alias) for alias in plans}
        self._unread, self._keyed = {alias: [] for alias in fast}, {}
        for task, summary in zip(tasks, self._run(f"{label} (source ranges)", tasks, options), strict=True):
            merged[task.alias].merge(summary)
            counts = reports[task.alias].ranges
            counts["source"] += 1
            counts["compared"] += summary.ranges_compared
            counts["matched"] += summary.ranges_matched
            counts["descended"] += summary.ranges_descended
            if summary.ranges_by_key:
                self._keyed.setdefault(task.alias, RangeSummary(task.alias)).merge(summary)
            elif summary.ranges_descended or (
                summary.ranges_matched and self.plans[task.alias].config.deletes == "soft"
            ):
                self._unread[task.alias].append((task.lo, task.hi))
        for alias, report in reports.items():
            counted = self._tombstones(report, merged[alias])
            self._counted[alias] = report.tombstones = counted
            report.extra_by_count = report.index_docs - merged[alias].matched - counted
            if report.extra_by_count < 0:
                report.notes.append(
                    f"the index holds {report.index_docs:,} documents but {merged[alias].matched:,} copies of "
                    "source ids were found: it changed while verify ran"
                )
        return merged

    def _tombstones(self, report: VerifyReport, source_side: RangeSummary) -> int:
        """The tombstones of gone rows in the alias's index, by count: those it held before the
        source side ran (a repair's new tombstones replace extra documents the source side
        counted already), less those of rows that came back."""
        return max(0, self._held.get(report.alias, 0) - source_side.matched_tombstones)

    def _tombstones_held(self, report: VerifyReport) -> int:
        """The tombstones the alias's index holds (0 unless ``deletes: soft`` and the target can
        count them: the index-side scan then tells them apart)."""
        if report.index is None or self.plans[report.alias].config.deletes != "soft":
            return 0
        try:
            return self.target.count_hash_prefix(report.index, TOMBSTONE_HASH_PREFIX)
        except (SparkIndexError, NotImplementedError) as exc:
            report.notes.append(f"tombstones are told from extra documents by a scan: cannot count them ({exc})")
            return 0

    def _index_side(
        self, reports: dict[str, VerifyReport], source_side: dict[str, RangeSummary], options: TaskOptions, label: str
    ) -> dict[str, RangeSummary]:
        """Extra documents, looked for only where the counts say there are some.

        A document without a sort key (written before documents stored one) lies in no key
        range: when the ranges find fewer extra documents than the counts, the index is scanned
        once more as a whole, by one task.
        """
        found = {alias: RangeSummary(alias, "index") for alias in reports}
        wanted = [r for r in reports.values() if r.index is not None and r.extra_by_count > 0]
        tasks: list[RangeTask] = []
        partial: set[str] = set()  # aliases whose index side reads only some of its ranges
        for r in wanted:
            assert r.index is not None
            if r.alias in self._unread:
                tasks += [RangeTask(r.alias, r.index, "index", lo=lo, hi=hi) for lo, hi in self._unread[r.alias]]
                partial.add(r.alias)
            else:
                tasks += index_tasks(self.target, r.alias, r.index, max(1, r.ranges["source"]), r.notes)
        self._scan(f"{label} (index ranges)", tasks, options, reports, found)
        short = [
            r
            for r in wanted
            if (r.ranges["index"] > 1 or r.alias in partial) and self._accounted(found[r.alias]) < self._expected(r)
        ]
        if short:
            whole = [RangeTask(r.alias, r.index, "index") for r in short]
            again = {r.alias: RangeSummary(r.alias, "index") for r in short}
            self._scan(f"{label} (whole index)", whole, options, reports, again)
            for r in short:
                r.notes.append(
                    f"the key ranges held {self._accounted(found[r.alias]):,} of the {self._expected(r):,} extra "
                    "documents the counts show; the rest lie outside the ranges scanned (no sort key, or no range "
                    "check), so the index was scanned whole"
                )
                keyed, scan = self._keyed.get(r.alias, RangeSummary(r.alias)), again[r.alias]
                # the whole scan saw every tombstone, those the key-by-key ranges counted too
                scan.tombstones = max(0, scan.tombstones - keyed.tombstones)
                if options.repair:  # the ranges' extras are deleted already: the scan found the rest
                    # (and, with soft deletes, the tombstones this repair wrote in their place)
                    written = self._deleted(r.alias, source_side, found) if self._soft(r.alias) else 0
                    scan.tombstones = max(0, scan.tombstones - found[r.alias].tombstones - written)
                    found[r.alias].merge(scan)
                else:  # the whole scan found every extra again; those found key by key are counted
                    scan.extra = max(0, scan.extra - keyed.extra)
                    found[r.alias] = scan
                lost = 0 if self._soft(r.alias) else self._deleted(r.alias, source_side, found)
                self._unplaced(r, found[r.alias], lost)
        return found

    def _soft(self, alias: str) -> bool:
        return self.plans[alias].config.deletes == "soft"

    @staticmethod
    def _deleted(alias: str, source_side: dict[str, RangeSummary], found: dict[str, RangeSummary]) -> int:
        """The documents this repair deleted (with soft deletes: turned into tombstones)."""
        return source_side[alias].deleted + found[alias].deleted

    def _unplaced(self, report: VerifyReport, found: RangeSummary, deleted: int) -> None:
        """An alias compared by checksum whose whole index scan still leaves documents unaccounted
        for holds copies of live ids the key ranges cannot place (under no sort key): compared
        again by id, unless the index lost as many documents while verify ran (motion), less
        those this repair *deleted*."""
        assert report.index is not None
        short = self._expected(report) - self._accounted(found)
        if report.path != CHECKSUMS or short <= 0:
            return
        if short > max(0, report.index_docs - self.target.count(report.index) - deleted):
            self._again[report.alias] = (
                f"{short:,} documents of the index are copies of documents the source has that no key range "
                "holds (no sort key): compared again by id"
            )

    def _accounted(self, found: RangeSummary) -> int:
        """The index's documents an index-side scan found that the source side did not count:
        extra documents and tombstones (with those the key-by-key ranges counted), and copies of
        rows a read replica lacks and its primary has (``matched`` on the index side)."""
        keyed = self._keyed.get(found.alias)
        return found.extra + found.tombstones + found.matched + (keyed.tombstones if keyed is not None else 0)

    def _expected(self, report: VerifyReport) -> int:
        """The index's documents that are no copy of a source id, by count (tombstones included)."""
        return report.extra_by_count + self._counted.get(report.alias, 0)

    def _scan(
        self,
        label: str,
        tasks: list[RangeTask],
        options: TaskOptions,
        reports: dict[str, VerifyReport],
        into: dict[str, RangeSummary],
    ) -> None:
        if not tasks:
            return
        self.progress.phase(f"{len(tasks)} index ranges: looking for extra documents")
        for task, summary in zip(tasks, self._run(label, tasks, options), strict=True):
            into[task.alias].merge(summary)
            reports[task.alias].ranges["index"] += 1


def _second_pass(first: VerifyReport, second: VerifyReport, repair: bool, held: int) -> VerifyReport:
    """The report of an alias compared by checksum, then again by id (``second``, whose
    ``path_reason`` says why). A verify's second pass saw all the first did: it stands alone. A
    repair's first pass fixed what it could, so both passes' drift and writes add up, against
    the index as it was before either wrote, less what no repair fixes and both passes counted:
    the rows that cannot be built (*held* of them with an older copy in the index, stale; the
    rest missing). A write the target refused in the first pass is tried, and counted, again."""
    for name in RANGE_COUNTS:
        second.ranges[name] += first.ranges[name]
    if not repair:
        return second
    again = {"unbuildable": second.unbuildable, "stale": held, "missing": second.unbuildable - held}
    for kind in KINDS:
        count = getattr(first, kind) + max(0, getattr(second, kind) - again.get(kind, 0))
        setattr(second, kind, count)
        second.samples[kind] = sorted({*first.samples[kind], *second.samples[kind]})[:SAMPLE]
    second.index_docs, second.extra_by_count = first.index_docs, first.extra_by_count
    before, after = first.repaired or {}, second.repaired or {}
    second.repaired = {k: before.get(k, 0) + after.get(k, 0) for k in ("indexed", "deleted", "failed")}
    second.notes = [*first.notes, *second.notes]
    return second


def _fill(report: VerifyReport, s: RangeSummary, repair: bool, counted: int, keyed: int) -> None:
    """The alias's report from its merged summaries; *counted*: the tombstones taken out of
    ``extra_by_count`` before the index-side scan, which sees them again; *keyed*: the extra
    documents ranges compared key by key found (``extra_by_count`` leaves them out)."""
    for kind in ("checked", *KINDS):
        setattr(report, kind, getattr(s, kind))
    report.samples = {k: list(v) for k, v in s.samples.items()}
    if report.ranges["index"]:
        report.tombstones = s.tombstones  # the scan's figure, as for extra documents
        if s.extra - keyed + s.tombstones != report.extra_by_count + counted:
            report.notes.append(
                f"the index-side scan found {s.extra - keyed:,} extra documents, the counts "
                f"{report.extra_by_count + counted - s.tombstones:,}: the index changed while verify ran"
            )
    if repair:
        report.repaired = {"indexed": s.indexed, "deleted": s.deleted, "failed": s.failed}
