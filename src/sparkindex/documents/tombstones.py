"""How a root document leaves its index: a delete, or a tombstone (``indexes[].deletes: soft``).

A row that is gone (or no longer passes the index's ``where:``) takes its document out of the
index. Two things make that more than a delete by id, and this module is the one place that knows
them, for change capture (:mod:`sparkindex.capture.apply`), verify's repair and anything else
that removes root documents:

* **Routing.** With ``indexes[].routing`` each document lives on the shard of its routing value.
  A delete without it goes to the shard of the id's hash and, on an engine with several shards,
  deletes nothing. The row is gone, so the value is read back from the index
  (:meth:`~sparkindex.targets.reader.TargetReader.routings`): each copy is deleted with its own
  (:func:`delete_copies`, which the removal of join children, the re-drive and repair use too).
  The same holds when a row's routing value changes: the copy under the old value must go
  (:func:`moved_copies`), or the index holds the document twice.
* **Soft deletes.** The document stays, as its last indexed body plus ``"_deleted": true`` and
  ``"_deleted_at"`` (UTC, ISO 8601, when the removal is applied), under the same routing and
  external version the delete would have had. The search engines' ``update`` API takes no
  external version, so the stored body is read back and written whole. Its content hash is
  :data:`TOMBSTONE_HASH_PREFIX` followed by the hash of the tombstone's canonical JSON: verify
  tells a tombstone from a live document by the hash alone (no bodies read), and a document
  already a tombstone is never rewritten. A document the index does not hold has no body to
  mark: nothing is written for it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sparkindex.checksums import CHECK_FIELDS
from sparkindex.config.indexes import IndexConfig
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.targets.base import DELETED_AT_FIELD, DELETED_FIELD, BulkItem, StoredDocument
from sparkindex.targets.reader import TargetReader

#: What the content hash of a tombstone begins with (a live document's is bare hex).
TOMBSTONE_HASH_PREFIX = "deleted:"


def is_tombstone(doc_hash: str | None) -> bool:
    """Whether a stored content hash is a soft delete's tombstone."""
    return doc_hash is not None and doc_hash.startswith(TOMBSTONE_HASH_PREFIX)


def deleted_at(now: dt.datetime | None = None) -> str:
    """``_deleted_at``'s value: UTC, ISO 8601 to the millisecond (every engine's date formats
    and Tantivy's RFC 3339 parse it)."""
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tombstone(stored: StoredDocument, when: str, version: int | None, sort_key: str | None = None) -> BulkItem:
    """The write that turns *stored* (a live document, read back whole) into its tombstone."""
    # the live document's check must not survive into its tombstone, which is in no range's
    # figure (a backend that returns its bookkeeping fields with the source would keep it)
    body = {k: v for k, v in stored.source.items() if k not in CHECK_FIELDS}
    body |= {DELETED_FIELD: True, DELETED_AT_FIELD: when}
    canonical = dumps_document(body)
    return BulkItem(
        stored.id,
        canonical,
        TOMBSTONE_HASH_PREFIX + content_hash(canonical),
        version=version,
        routing=stored.routing,
        fields=body,
        sort_key=stored.sort_key or sort_key,
    )


@dataclass(frozen=True)
class Removal:
    """A root document to take out: its id, the external version a delete would carry (None:
    unversioned, as a repair writes) and its sort key where the caller knows it."""

    id: str
    version: int | None = None
    sort_key: str | None = None


def root_removals(
    reader: TargetReader,
    index: str,
    config: IndexConfig,
    removals: Sequence[Removal],
    when: str | None = None,
    *,
    stored_routing: bool = False,
) -> list[BulkItem]:
    """The writes that take these root documents out of *index* as *config* says: deletes (each
    copy with its routing, when the index routes) or tombstones (``deletes: soft``, stamped
    *when*, by default now). Join children are never removed here: they are always deleted.
    *stored_routing*: read the routings back even when *config* names no routing column (repair,
    on a target that routes: the index may hold copies written under a routing since removed)."""
    if not removals:
        return []
    if config.deletes == "soft":
        return _soft(reader, index, removals, when or deleted_at())
    if config.routing is None and not stored_routing:
        return [BulkItem(r.id, op="delete", version=r.version, sort_key=r.sort_key) for r in removals]
    return delete_copies(reader, index, removals)


def delete_copies(reader: TargetReader, index: str, removals: Sequence[Removal]) -> list[BulkItem]:
    """Deletes of every copy *index* holds of these documents, each under the routing it is
    stored with (read back), at the removal's version. An id the index does not hold gets one
    unrouted delete: it removes nothing, but an engine keeps its version, so a late older write
    of the document is refused."""
    if not removals:
        return []
    held = reader.routings(index, list(dict.fromkeys(r.id for r in removals)))
    return [
        BulkItem(r.id, op="delete", version=r.version, routing=routing, sort_key=r.sort_key)
        for r in removals
        for routing in dict.fromkeys(held.get(r.id) or [None])
    ]


def _soft(reader: TargetReader, index: str, removals: Sequence[Removal], when: str) -> list[BulkItem]:
    # a target that cannot read documents back by id refuses here (PermanentError), naming itself
    stored = reader.documents_by_id(index, [r.id for r in removals])
    copies: dict[str, list[StoredDocument]] = {}
    for doc in stored:
        copies.setdefault(doc.id, []).append(doc)
    items: list[BulkItem] = []
    for r in removals:
        held = copies.get(r.id, [])
        if not held:
            continue
        # one copy stays (a tombstone already, or the first): others (a document stored twice,
        # under another routing) are deleted, so that one tombstone is left
        keep = next((d for d in held if is_tombstone(d.hash)), held[0])
        items += [BulkItem(d.id, op="delete", version=r.version, routing=d.routing) for d in held if d is not keep]
        if not is_tombstone(keep.hash):
            items.append(tombstone(keep, when, r.version, r.sort_key))
    return items


def moved_copies(reader: TargetReader, index: str, items: Sequence[BulkItem]) -> list[BulkItem]:
    """Deletes of the copies of these documents that *index* holds under another routing than
    the one they are about to be written with (None, unrouted, included): a row whose routing
    value changed, a join child moved to another parent, an index whose routing column was
    removed or replaced. They must be written before *items*: on one shard both routings name
    the same document. Callers ask only where documents can be routed at all."""
    routed = {i.id: i for i in items if i.op == "index"}
    if not routed:
        return []
    deletes: list[BulkItem] = []
    for doc_id, routings in reader.routings(index, list(routed)).items():
        item = routed[doc_id]
        for routing in dict.fromkeys(routings):
            if routing != item.routing:
                deletes.append(BulkItem(doc_id, op="delete", version=item.version, routing=routing))
    return deletes


__all__ = [
    "TOMBSTONE_HASH_PREFIX",
    "Removal",
    "delete_copies",
    "deleted_at",
    "is_tombstone",
    "moved_copies",
    "root_removals",
    "tombstone",
]
