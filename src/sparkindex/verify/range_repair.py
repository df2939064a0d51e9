"""Repair's writes for one range: what a task found, fixed in the index the alias points at.

Missing and stale documents are indexed from the documents the task just built, duplicates are
deleted and then indexed once, extra documents removed as a sync removes them (deleted, or with
``deletes: soft`` turned into tombstones; :mod:`sparkindex.documents.tombstones`). On a target
that routes, deletes carry the routing each copy is stored with, read back from the index
whatever the plan says now, and a rewritten document's copies under another routing are deleted
first. Removed root documents' transform cache entries are forgotten. Writes go through the bulk
retry loop and count as durable when acknowledged; rejected ones are dead-lettered under the
repair run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sparkindex.documents.builder import BuiltDocument
from sparkindex.documents.join import parent_prefixes
from sparkindex.documents.tombstones import Removal, delete_copies, moved_copies, root_removals
from sparkindex.errors import WritesLost
from sparkindex.targets.base import BulkItem, WriteMark
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.range_task import RangeTask, Resources, TaskOptions
from sparkindex.worker.bulk import bulk_with_retries

#: the job id dead letters of repair writes are recorded under
REPAIR_JOB = "verify-repair"


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
