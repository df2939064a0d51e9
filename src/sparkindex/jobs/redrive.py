"""``sparkindex dlq redrive``: rebuild dead-lettered documents from the source by key and retry them.

Dead letters are walked per alias in id order, a page at a time. Each page's ids are turned back
into row keys (:class:`SourceLookup`; a join child is rebuilt through its parent, which builds
its children) and the documents are built with the reindex's builder (``by_keys``: the source as
it is now) and written to the index the alias points at now, through the bulk retry loop.

* written and acknowledged: resolved ``redriven`` (the letter leaves the dead-letter table);
* the row is gone from the source: its document is deleted from the index and the letter
  resolved ``gone`` (a deleted row must not stay searchable);
* still failing (the row still cannot be built, or the target rejects it again): the letter
  stays, with the new error and one more attempt (each re-drive is an attempt of its own).

Re-drives are small (the documents that failed, not the index), so this runs in the driver.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.coordination.records import DeadLetter
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, make_builder
from sparkindex.documents.planning import resolve_plans, selected_aliases
from sparkindex.documents.source_lookup import SourceLookup
from sparkindex.documents.tombstones import Removal, delete_copies, moved_copies, root_removals
from sparkindex.resources import open_source, open_store, open_target
from sparkindex.retry import Backoff
from sparkindex.targets.base import BulkItem
from sparkindex.targets.target import Target
from sparkindex.worker.bulk import bulk_with_retries

PAGE = 500
#: still-failing letters listed in the report at most
LISTED = 50

Key = tuple[Any, ...]


@dataclass
class RedriveReport:
    run_id: str
    alias: str | None = None
    error_class: str | None = None
    attempted: int = 0
    succeeded: int = 0
    gone: int = 0
    failed: int = 0
    #: letters left alone because their alias points at no index
    skipped: int = 0
    still_failing: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 0 if self.failed == self.skipped == 0 else 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Outcome:
    """One page's letters, sorted by what became of them."""

    written: list[DeadLetter] = field(default_factory=list)
    gone: list[DeadLetter] = field(default_factory=list)
    failed: list[tuple[DeadLetter, str, str]] = field(default_factory=list)  # letter, class, message


class Redrive:
    """Re-drives the dead letters of one alias."""

    def __init__(
        self, pipeline: Pipeline, builder: DocumentBuilder, target: Target, store: CoordinationStore, run_id: str
    ) -> None:
        self.p = pipeline
        self.builder = builder
        self.lookup = SourceLookup(builder.source, builder.plan)
        self.target = target
        self.store = store
        self.run_id = run_id

    def page(self, index: str, letters: Sequence[DeadLetter]) -> _Outcome:
        out = _Outcome()
        by_id = {d.doc_id: d for d in letters}
        roots: list[Key] = []
        children: dict[str, tuple[Any, list[Key]]] = {}
        for d in letters:
            ref = self.lookup.child_of(d.doc_id)
            if ref is not None:
                children.setdefault(ref.relation.name, (ref.relation, []))[1].append(ref.key)
                continue
            key = self.lookup.root_key(d.doc_id)
            if key is None:
                table = self.builder.plan.table.name
                out.failed.append((d, "NotASourceKey", f"the id names no possible row of table {table!r}"))
            else:
                roots.append(key)
        for rel, keys in children.values():  # a child is rebuilt with its parent
            roots.extend(self.lookup.parents_of(rel, keys).values())
        docs, failures, _ = self.builder.by_keys(roots) if roots else ([], [], [])
        built = {doc.id: doc for doc in docs if doc.id in by_id}
        for f in failures:
            if f.doc_id in by_id:
                out.failed.append((by_id[f.doc_id], f.error_class, f.reason))
        # Neither built nor failed: the row is gone (or, for a child, its parent or its parent key).
        accounted = {*built, *(x[0].doc_id for x in out.failed)}
        out.gone = [d for d in letters if d.doc_id not in accounted]
        self._write(index, [built[d] for d in by_id if d in built], by_id, out)
        self._delete(index, out.gone)
        return out

    def _retry(self, index: str, items: Sequence[BulkItem]) -> list[tuple[str, str, str]]:
        j = self.p.job
        outcome = bulk_with_retries(self.target, index, items, j.retries, Backoff(j.backoff_initial_s, j.backoff_max_s))
        return outcome.failures

    def _write(self, index: str, docs: Sequence[BuiltDocument], by_id: dict[str, DeadLetter], out: _Outcome) -> None:
        """Write the rebuilt documents; on a target that routes, each one's copies under another
        routing go first (its row's routing value changed while it was dead-lettered, a child
        moved to another parent), as change capture does (:func:`moved_copies`). A document
        whose old copy could not be deleted stays dead-lettered."""
        if not docs:
            return
        items = [d.bulk_item() for d in docs]
        if self.target.supports_routing:
            items = moved_copies(self.target, index, items) + items
        rejected = {doc_id: (cls, msg) for doc_id, cls, msg in self._retry(index, items)}
        for doc in docs:
            if doc.id in rejected:
                out.failed.append((by_id[doc.id], *rejected[doc.id]))
            else:
                out.written.append(by_id[doc.id])

    def _delete(self, index: str, letters: Sequence[DeadLetter]) -> None:
        """Take out the documents whose rows are gone: a root document as the index's delete mode
        says (a tombstone under ``deletes: soft``), each copy under the routing it is stored
        with (read back on a target that routes, whatever the plan says now); a join child under
        its stored routing (its parent's id). Removed root documents' transform cache entries go."""
        if not letters:
            return
        children = {d.doc_id for d in letters if self.lookup.child_of(d.doc_id) is not None}
        roots = [Removal(d.doc_id) for d in letters if d.doc_id not in children]
        config = self.builder.plan.config
        items = root_removals(self.target, index, config, roots, stored_routing=self.target.supports_routing)
        items += delete_copies(self.target, index, [Removal(doc_id) for doc_id in sorted(children)])
        if items:
            self._retry(index, items)
        transform = config.transform
        if roots and transform is not None and transform.on_change:
            self.store.transform_cache.forget_ids(self.builder.plan.alias, [r.id for r in roots])

    def record(self, out: _Outcome) -> None:
        """Resolve what succeeded; count one more attempt for what did not (per original job)."""
        self.store.dead_letters.resolve(out.written, "redriven")
        self.store.dead_letters.resolve(out.gone, "gone")
        groups: dict[tuple[str, str | None], list[tuple[str, str, str]]] = {}
        for d, cls, msg in out.failed:
            groups.setdefault((d.job_id, d.partition_id), []).append((d.doc_id, cls, msg))
        alias = self.builder.plan.alias
        for (job_id, partition_id), failures in groups.items():
            self.store.dead_letters.add(job_id, alias, partition_id, failures, attempt=f"redrive:{self.run_id}")


def redrive(
    pipeline: Pipeline,
    aliases: Sequence[str] | None = None,
    error_class: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> RedriveReport:
    """Re-drive the dead letters of *aliases* (all by default), of one *error_class* if given."""
    started = time.monotonic()
    p = pipeline
    chosen = selected_aliases(p, aliases)
    report = RedriveReport(str(uuid.uuid4()), ",".join(aliases) if aliases else None, error_class)
    with open_store(p) as store, open_source(p) as source, open_target(p) as target:
        total = sum(store.dead_letters.count_matching(a, error_class) for a in chosen)
        done = 0
        if on_progress is not None:
            on_progress(0, total)
        plans = resolve_plans(p, source, chosen, target)
        for alias in chosen:
            index = target.alias_target(alias)
            if index is None:
                n = store.dead_letters.count_matching(alias, error_class)
                if n:
                    report.skipped += n
                    report.notes.append(f"alias {alias!r} points at no index; reindex first ({n} letters left)")
                continue
            builder = make_builder(source, plans[alias][0], store.transform_cache)
            worker = Redrive(p, builder, target, store, report.run_id)
            after: str | None = None
            while True:
                letters = store.dead_letters.page(alias, after, PAGE, error_class)
                if not letters:
                    break
                after = letters[-1].doc_id
                out = worker.page(index, letters)
                worker.record(out)
                _count(report, out)
                done += len(letters)
                if on_progress is not None:
                    on_progress(done, total)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _count(report: RedriveReport, out: _Outcome) -> None:
    report.attempted += len(out.written) + len(out.gone) + len(out.failed)
    report.succeeded += len(out.written)
    report.gone += len(out.gone)
    report.failed += len(out.failed)
    for d, cls, msg in out.failed:
        if len(report.still_failing) < LISTED:
            entry = {"alias": d.alias, "doc_id": d.doc_id, "error_class": cls, "error": msg[:500]}
            report.still_failing.append({**entry, "attempts": d.attempts + 1})
