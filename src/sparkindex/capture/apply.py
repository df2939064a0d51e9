"""The apply step: changed rows -> root keys -> documents rebuilt by key -> versioned writes.

Documents are rebuilt from the current rows through the same builder as a full reindex, so a
change never indexes a partial row image; a root key whose row is gone (or no longer passes the
index's ``where:``) becomes a delete, with the routing its document was written with, or with
``deletes: soft`` a tombstone (:mod:`sparkindex.documents.tombstones`). Every
write carries an external version: the index's version column where it has one (so that sync and
reindex agree), otherwise the newest log position that touched the document. A target that
compares versions itself (OpenSearch/Elasticsearch, ``external_gte``) gets them with the write;
for one that does not (Tantivy) the versions written are kept in the coordination store and a
write older than what was written before is dropped here, deletes included (a tombstone).

A TRUNCATE of any table of the relation tree says that rows went without saying which: every
document the index holds is rebuilt by its key at the truncate's position, so those whose root
row is gone are deleted and the others lose what they held of the truncated table. A key diff's
range (polling without tombstones) is checked the same way, for documents whose root row is gone.
Join children (documents of their own, routed to their parent) that are gone, moved or out of
their relation's ``where:`` are deleted first, and so are the children of roots that have no
document any more (:mod:`sparkindex.capture.join_removals`): a rebuild only writes the children
there are. A root row that leaves the ``where:`` of an index with a version column is removed at
its row's version, not at the log position: its document was written with that version.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from sparkindex.capture.fanout import FanOut
from sparkindex.capture.join_removals import child_deletes, current_parents, removed_children
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.documents.join import parent_prefixes
from sparkindex.documents.source_lookup import SourceLookup, parse_key
from sparkindex.documents.tombstones import Removal, deleted_at, is_tombstone, moved_copies, root_removals
from sparkindex.documents.versions import external_version
from sparkindex.errors import DocumentError, TransientError
from sparkindex.keys import document_id, dump_key, sort_key
from sparkindex.sources.base import Key, coerce_key
from sparkindex.sources.change_model import Change
from sparkindex.targets.base import BulkItem
from sparkindex.targets.reader import TargetReader
from sparkindex.targets.target import Target

log = logging.getLogger(__name__)

#: Root keys rebuilt per builder call (one IN query per relation each).
KEYS_PER_BUILD = 1000


@dataclass
class Counts:
    applied: int = 0
    deleted: int = 0
    failed: int = 0
    skipped: int = 0  # older than what the index holds
    deferred: int = 0

    def add(self, other: Counts) -> None:
        self.applied += other.applied
        self.deleted += other.deleted
        self.failed += other.failed
        self.skipped += other.skipped
        self.deferred += other.deferred


@dataclass
class Consumer:
    """One alias as a sync applies to it."""

    alias: str
    fanout: FanOut
    builder: DocumentBuilder
    failures: list[DocumentError] = field(default_factory=list)


class Applier:
    def __init__(
        self,
        target: Target,
        store: CoordinationStore,
        job_id: str,
        batch_size: int = 1000,
    ) -> None:
        self.target = target
        self.store = store
        self.job_id = job_id  # dead letters are filed under it ("sync:<group>", a reindex job)
        self.batch_size = batch_size
        self.keeps_ledger = not target.honours_versions

    def apply(self, consumer: Consumer, index: str, changes: Sequence[Change]) -> Counts:
        """Apply *changes* to *index* for *consumer*; raises :class:`TransientError` when the
        source or target failed in a way a retry may fix (the batch is redone as a whole)."""
        counts = Counts()
        tables = set(consumer.fanout.tables())
        truncated = [
            c
            for c in changes
            if c.op == "truncate" and c.table in tables and (c.old or {}).get("alias", consumer.alias) == consumer.alias
        ]
        rechecks = [c for c in changes if c.op == "recheck" and (c.old or {}).get("alias") == consumer.alias]
        roots = consumer.fanout.root_keys([c for c in changes if c.op in ("insert", "update", "delete")])
        if roots.deferred:
            self._defer(consumer, roots.deferred)
            counts.deferred += len(roots.deferred)
        plan = consumer.fanout.plan
        # children gone or moved go first: the rebuilds below write the copies that stay
        # (deferred relations' changes wait for their refresh, removals included)
        deferred = {id(c) for c in roots.deferred}
        removed = removed_children(plan, consumer.fanout.source, [c for c in changes if id(c) not in deferred])
        newest = max((c.position for c in changes), default=0)
        counts.add(self._remove_children(consumer, index, removed, roots.keys, newest))
        for change in truncated:  # each one range of the index (ranges.spread_truncates), or all of it
            bounds = _bounds(change)
            joined = {r.name for r in plan.joins if r.table.name == change.table}
            deletes = child_deletes(self.target, index, plan, joined, change.position, key_range=bounds)
            counts.add(self._remove_children(consumer, index, deletes, roots.keys, change.position))
            every = (
                (k, max(change.position, roots.keys.pop(k, -1)))
                for k in _indexed_keys(self.target, index, consumer, bounds)
            )
            counts.add(self._rebuild_chunks(consumer, index, every))
        for change in rechecks:  # rebuilt by key, the gone roots' children go with them (rebuild)
            counts.add(self._rebuild_chunks(consumer, index, self._gone(consumer, index, change)))
        counts.add(self._rebuild_chunks(consumer, index, roots.keys.items()))
        return counts

    def _remove_children(
        self, consumer: Consumer, index: str, deletes: list[BulkItem], keys: dict[Key, int], position: int
    ) -> Counts:
        """Delete old copies of join children, then make sure this task rebuilds the parent each
        child's row has now (if it still has a row): the task's last write of a child is then its
        current copy, whatever another task wrote at the same version (join_removals says why)."""
        counts = self._write_all(consumer.alias, index, deletes)
        if deletes:
            for parent in current_parents(consumer.fanout.plan, consumer.fanout.source, [i.id for i in deletes]):
                keys[parent] = max(keys.get(parent, -1), position)
        return counts

    def _write_all(self, alias: str, index: str, items: list[BulkItem]) -> Counts:
        counts = Counts()
        for i in range(0, len(items), self.batch_size):
            counts.add(self.write(alias, index, items[i : i + self.batch_size]))
        return counts

    def _gone(self, consumer: Consumer, index: str, change: Change) -> Iterator[tuple[Key, int]]:
        """A key diff's range: the root keys of the documents of *index* in it whose row is gone,
        at the change's position (rebuilt by key, they become deletes; a row written again later
        wins)."""
        lookup = SourceLookup(consumer.fanout.source, consumer.fanout.plan)
        keys = _indexed_keys(self.target, index, consumer, _bounds(change))
        while chunk := list(itertools.islice(keys, KEYS_PER_BUILD)):
            present = lookup.existing_roots(chunk)
            yield from ((k, change.position) for k in chunk if document_id(k) not in present)

    def _rebuild_chunks(self, consumer: Consumer, index: str, keys: Iterable[tuple[Key, int]]) -> Counts:
        """Rebuild *keys* (root key, position) in builder calls of :data:`KEYS_PER_BUILD`."""
        counts, pending = Counts(), iter(keys)
        while chunk := dict(itertools.islice(pending, KEYS_PER_BUILD)):
            counts.add(self.rebuild(consumer, index, chunk))
        return counts

    def rebuild(self, consumer: Consumer, index: str, keys: dict[Key, int]) -> Counts:
        """Rebuild the documents of *keys* (root key -> position) and write them. With join
        relations, the children of roots that have no document any more go first (:meth:`_orphans`)."""
        keys = dict(keys)  # the parents of removed children join it
        counts = self._orphans(consumer, index, keys) if consumer.fanout.plan.joins else Counts()
        items, failed, removed = self._build(consumer, keys, index)
        counts.add(self._write_all(consumer.alias, index, items))
        counts.failed += failed
        self._forget(consumer, removed)
        return counts

    def _orphans(self, consumer: Consumer, index: str, keys: dict[Key, int]) -> Counts:
        """Delete the join children of the roots of *keys* whose rows are gone or no longer pass
        the index's ``where:`` (their rebuild removes the parent only), at each root's position,
        read back from the index with their routing; then make sure the parents their rows have
        now are rebuilt too (:meth:`_remove_children`). Children with a version column of their
        own cannot be deleted at a log position (:func:`child_deletes`): they are left to verify."""
        plan = consumer.fanout.plan
        relations = [r.name for r in plan.joins if r.version is None]
        if not relations:
            return Counts()
        typed: dict[Key, int] = {}
        for key, position in keys.items():
            coerced = coerce_key(plan.table, plan.id_columns, tuple(key))
            if coerced is not None and None not in coerced:
                typed[coerced] = max(position, typed.get(coerced, -1))
        present = SourceLookup(consumer.fanout.source, plan).existing_roots(typed)
        by_position: dict[int, list[Key]] = {}
        for key, position in typed.items():
            if document_id(key) not in present:
                by_position.setdefault(position, []).append(key)
        counts = Counts()
        for position, parents in sorted(by_position.items()):
            deletes = child_deletes(self.target, index, plan, relations, position, parents)
            counts.add(self._remove_children(consumer, index, deletes, keys, position))
        return counts

    def _forget(self, consumer: Consumer, removed: list[str]) -> None:
        """Drop the transform cache's entries of removed root documents (an ``on_change``
        transform keeps one per document; a row that comes back is transformed again)."""
        transform = consumer.fanout.plan.config.transform
        if removed and transform is not None and transform.on_change:
            self.store.transform_cache.forget_ids(consumer.alias, removed)

    def build(self, consumer: Consumer, keys: dict[Key, int], index: str | None = None) -> tuple[list[BulkItem], int]:
        """The writes that bring the documents of *keys* up to date in *index*: upserts of the
        rows that exist, removals of those that are gone; rows that cannot be built are
        dead-lettered (their number is returned). Removals read the index (the routing their
        documents were written with, a soft delete's body) when the index routes or deletes
        softly; without *index* they are plain deletes."""
        items, failed, _ = self._build(consumer, keys, index)
        return items, failed

    def _build(
        self, consumer: Consumer, keys: dict[Key, int], index: str | None
    ) -> tuple[list[BulkItem], int, list[str]]:
        """:meth:`build`, and the ids of the root documents it removes."""
        docs, failures, missing = consumer.builder.by_keys(list(keys))
        positions = {document_id(k): p for k, p in keys.items()}
        items: list[BulkItem] = []
        for doc in docs:
            version = doc.version
            if version is None:  # a root's own position; a join child's is its parent's (routing)
                version = positions.get(doc.id, positions.get(doc.routing or "", 0))
            items.append(
                BulkItem(
                    doc.id,
                    doc.source,
                    doc.hash,
                    version=version,
                    routing=doc.routing,
                    fields=doc.fields,
                    sort_key=doc.sort_key,
                    check=doc.check,
                )
            )
        plan = consumer.builder.plan
        config = plan.config
        if index is not None and config.routing is not None:
            # a row whose routing value changed: its old copy goes first (same shard or not)
            roots = [i for i in items if i.id in positions]
            items = moved_copies(self.target, index, roots) + items
        by_id = {document_id(k): k for k in keys}
        versions = self._filtered_versions(consumer, [by_id[d] for d in missing if d in by_id])
        gone = []
        for doc_id in missing:
            key = by_id.get(doc_id)
            version = versions.get(doc_id, positions.get(doc_id, 0))
            gone.append(Removal(doc_id, version, None if key is None else sort_key(key)))
        if index is None:
            items += [BulkItem(r.id, op="delete", version=r.version, sort_key=r.sort_key) for r in gone]
        else:
            items += root_removals(self.target, index, config, gone, deleted_at())
        if failures:
            self._dead_letter(consumer.alias, [(f.doc_id, f.error_class, f.reason) for f in failures])
        return items, len(failures), missing

    def _filtered_versions(self, consumer: Consumer, keys: list[Key]) -> dict[str, int]:
        """Document id -> the version a removal must carry, for the keys among *keys* whose rows
        still exist but no longer pass the index's ``where:``, when the index has a version column:
        their documents were written with the column's value, which a removal at a log position
        (lower: an LSN, a binlog offset, a polled counter) would not beat, so the engine would
        refuse it (Tantivy's ledger drop it). The row's value now is at least the one written.
        Only the column's value is used, never a higher log position: a row coming back into the
        filter is written with the column's value again, which must beat the removal."""
        plan = consumer.builder.plan
        if plan.version is None or plan.shape.where is None or not keys:
            return {}
        columns = list(dict.fromkeys([*plan.id_columns, plan.version]))
        rows = consumer.fanout.source.fetch_where_in(plan.table, plan.id_columns, keys, columns, plan.id_columns)
        at = columns.index(plan.version)
        out: dict[str, int] = {}
        for row in rows:  # the column's value as the builder reads it
            doc_id = document_id(tuple(row[: len(plan.id_columns)]))
            checked = external_version(doc_id, plan.version, row[at])
            if isinstance(checked, DocumentError):
                log.warning("%s: %s; removed at the log position instead", consumer.alias, checked.reason)
            else:
                out[doc_id] = checked
        return out

    def write(self, alias: str, index: str, items: list[BulkItem]) -> Counts:
        """Write *items*, dropping those older than what the index holds (ledger targets; the
        engines refuse them themselves and say so per item)."""
        counts = Counts()
        if self.keeps_ledger:
            held = self.store.ledger.versions(index, [i.id for i in items])
            fresh = [i for i in items if i.version is None or i.version >= held.get(i.id, -1)]
            counts.skipped += len(items) - len(fresh)
            items = fresh
        if not items:
            return counts
        results = self.target.bulk(index, items)
        transient = [r for r in results if not r.ok and r.transient]
        if transient:
            raise TransientError(f"{len(transient)} write(s) to {index!r} failed: {transient[0].error}")
        bad = [(r.id, r.error_class or "WriteRejected", r.error or "") for r in results if not r.ok]
        if bad:
            self._dead_letter(alias, bad)
        ok = {r.id for r in results if r.ok}
        obsolete = {r.id for r in results if r.obsolete}
        written = {i.id for i in items if i.op == "index"}
        for item in items:
            if item.op == "delete" and item.id in written:
                continue  # the old copy of a moved document (moved_copies): its write counts
            if item.id not in ok:
                counts.failed += 1
            elif item.id in obsolete:
                counts.skipped += 1
            elif item.op == "delete" or is_tombstone(item.hash):  # a soft delete is a delete
                counts.deleted += 1
            else:
                counts.applied += 1
        if self.keeps_ledger:
            self.store.ledger.record_versions(
                index, {i.id: i.version for i in items if i.id in ok and i.version is not None}
            )
        return counts

    def _dead_letter(self, alias: str, failures: list[tuple[str, str, str]]) -> None:
        for doc_id, error_class, message in failures[:5]:
            log.warning("%s: document %s not indexed (%s): %s", alias, doc_id, error_class, message[:300])
        self.store.dead_letters.add(self.job_id, alias, None, failures, attempt=None)

    def _defer(self, consumer: Consumer, changes: Sequence[Change]) -> None:
        pk_of: Callable[[str], Sequence[str]] = lambda t: consumer.fanout.source.table(t).primary_key  # noqa: E731
        records = []
        for change in changes:
            pk = list(pk_of(change.table))
            image = change.old or change.new or {}
            key = dump_key([image.get(c) for c in pk]) or "[]"
            records.append((change.table, key, change.values(), change.position))
        self.store.deferred_changes.defer(consumer.alias, records)


def _indexed_keys(
    target: TargetReader, index: str, consumer: Consumer, key_range: tuple[str | None, str | None] | None = None
) -> Iterator[Key]:
    """The root keys of the documents *index* holds (in a sort-key range); join children,
    ``<relation>:<key>``, are rebuilt with their parents, and a soft delete's tombstones are
    left alone (their rows are gone already; a row that comes back is an insert)."""
    plan = consumer.fanout.plan
    children = parent_prefixes(plan.joins)
    soft = plan.config.deletes == "soft"
    for doc_id, doc_hash in target.scan_hashes(index, key_range=key_range):
        if (children and doc_id.startswith(children)) or (soft and is_tombstone(doc_hash)):
            continue
        key = parse_key(plan.table, plan.id_columns, doc_id)
        if key is not None:
            yield key


def _bounds(change: Change) -> tuple[str | None, str | None] | None:
    """The sort-key range a recheck or a spread truncate covers (None: the whole index)."""
    if not change.old or "alias" not in change.old:
        return None
    return change.old.get("lo"), change.old.get("hi")
