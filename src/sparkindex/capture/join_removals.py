"""Join children that change capture must delete itself.

Rebuilding a parent by key writes the children its rows have now (:mod:`sparkindex.documents.join`);
it cannot delete the documents of children that are no longer there, because a child is a
document of its own, routed to its parent's shard. So the apply step deletes, before it rebuilds:

* the document of a child row that was deleted, under the routing its old row image gives;
* the old copy of a child row whose key or parent changed (a moved child): its id or routing is
  no longer what the rebuild writes, and on an engine with several shards the old copy would stay
  on the old parent's shard beside the new one;
* the document of a child row that no longer passes its relation's ``where:`` (same id, same
  parent: the rebuild simply no longer writes it), found by reading the changed rows by key
  through the filter;
* every child of a truncated join table, and the children of parents that have no document any
  more (their rows gone, found by a key diff or a rebuild, or out of the index's ``where:``),
  read back from the index with their routing (the join field names each child's parent).

The deletes carry the external version the child was written with: its row's version column
where the relation has one (from the old row image), otherwise the change's log position.

A delete and a rewrite of the same child can meet at one version (a TRUNCATE and the inserts of
its transaction share the commit's position) in different Spark tasks, and the engine keeps
whichever lands last. So the task that deletes a child also rebuilds the parent the child's row
has now, if it has one (:func:`current_parents`), after its deletes: its own last write for that
child is then the current one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sparkindex.documents.join import child_id, routing_of
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.documents.source_lookup import SourceLookup, parse_key
from sparkindex.documents.versions import external_version
from sparkindex.errors import DocumentError, PermanentError
from sparkindex.keys import sort_key
from sparkindex.sources.base import Key, Source, coerce_key
from sparkindex.sources.change_model import Change
from sparkindex.targets.base import BulkItem, KeyBounds
from sparkindex.targets.reader import TargetReader

log = logging.getLogger(__name__)

#: documents read back per page when looking for children in the index
PAGE = 1000


def removed_children(plan: IndexPlan, source: Source, changes: Sequence[Change]) -> list[BulkItem]:
    """Deletes of the old copies of join children that *changes* deleted or moved, and of the
    children whose rows *changes* took out of their relation's ``where:`` (:func:`_filtered_out`)."""
    by_table = {rel.table.name: rel for rel in plan.joins}
    items: list[BulkItem] = []
    stayed: list[tuple[RelationPlan, _Child, Change]] = []
    for change in changes:
        rel = by_table.get(change.table)
        if rel is None or change.op not in ("delete", "update"):
            continue
        new = _identity(plan, rel, change.new) if change.op == "update" and change.new is not None else None
        old = _identity(plan, rel, change.old) if change.old else None
        if old is None:
            # the old image lacks the key or the parent (no REPLICA IDENTITY FULL; polling has
            # none): only the row as it is now can be checked against the filter
            if new is not None:
                stayed.append((rel, new, change))
            continue
        if new is not None and new.id == old.id and new.routing == old.routing:
            stayed.append((rel, new, change))  # same id, same parent: rewritten in place, if it still passes
            continue
        items.append(BulkItem(old.id, op="delete", routing=old.routing, version=_version(rel, old.id, change)))
    return items + _filtered_out(plan, source, stayed)


def _filtered_out(
    plan: IndexPlan, source: Source, stayed: Sequence[tuple[RelationPlan, _Child, Change]]
) -> list[BulkItem]:
    """Deletes of the children among *stayed* (changed rows that kept their id and parent) whose
    rows no longer pass their relation's ``where:``: the parent's rebuild writes only the
    children its filtered rows have, so nothing else would delete their documents. The rows are
    read by key through the filter (:meth:`SourceLookup.parents_of`), as they are now: a row that
    came back in later is left to the rebuild. Each delete carries the routing the newest row
    image gives (its parent's id) and, with a version column, the row's version in that image (at
    least the version its document was written with); otherwise the change's position."""
    wanted: dict[str, tuple[RelationPlan, _Child, int]] = {}
    for rel, child, change in stayed:
        if rel.shape.where is None:
            continue  # every row of the relation makes a child: none can leave
        version = _version(rel, child.id, change, change.new or change.old)
        held = wanted.get(child.id)
        wanted[child.id] = (rel, child, version if held is None else max(held[2], version))
    if not wanted:
        return []
    lookup = SourceLookup(source, plan)
    present: set[str] = set()
    for rel in {r.name: r for r, _, _ in wanted.values()}.values():
        keys = [child.key for r, child, _ in wanted.values() if r.name == rel.name]
        present |= set(lookup.parents_of(rel, keys))
    return [
        BulkItem(doc_id, op="delete", routing=child.routing, version=version)
        for doc_id, (_, child, version) in wanted.items()
        if doc_id not in present
    ]


@dataclass(frozen=True)
class _Child:
    """A join child as one row image names it: its document id, its key and its routing."""

    id: str
    key: Key
    routing: str


def _identity(plan: IndexPlan, rel: RelationPlan, image: dict[str, Any]) -> _Child | None:
    """The child whose row image is *image* (None when the image lacks its key or parent)."""
    if any(c not in image for c in [*rel.id_columns, *rel.remote_key]):
        return None
    key = coerce_key(rel.table, rel.id_columns, tuple(image[c] for c in rel.id_columns))
    parent = coerce_key(plan.table, plan.id_columns, tuple(image[c] for c in rel.remote_key))
    if key is None or parent is None or None in parent:
        return None
    return _Child(child_id(rel.name, key), key, routing_of(parent))


def _version(rel: RelationPlan, doc_id: str, change: Change, image: dict[str, Any] | None = None) -> int:
    """The version a delete of the child *doc_id* carries: its row's version column in *image*
    (by default the old image), or the change's position when the relation has none."""
    image = change.old if image is None else image
    if rel.version is None:
        return change.position
    if not image or rel.version not in image:
        log.warning("%s: the row image has no %r: deleted at the log position instead", doc_id, rel.version)
        return change.position
    typed = coerce_key(rel.table, [rel.version], (image[rel.version],))
    checked = external_version(doc_id, rel.version, None if typed is None else typed[0])
    return change.position if isinstance(checked, DocumentError) else checked


def indexed_children(
    target: TargetReader,
    index: str,
    plan: IndexPlan,
    relations: Collection[str],
    key_range: KeyBounds | None = None,
) -> Iterator[tuple[str, str]]:
    """(document id, parent id) of the children of *relations* that *index* holds, in a key range."""
    field = plan.join_field
    if field is None or not relations:
        return
    prefixes = tuple(f"{name}:" for name in relations)
    after: str | None = None
    while True:
        page = target.read_documents(index, key_range, after, PAGE, [field])
        for doc in page:
            join = doc.source.get(field)
            if doc.id.startswith(prefixes) and isinstance(join, dict) and join.get("parent") is not None:
                yield doc.id, str(join["parent"])
        if len(page) < PAGE:
            return
        if page[-1].sort_key is None or page[-1].sort_key == after:
            raise PermanentError(
                f"{index}: documents without a sort key ({page[-1].id!r}): cannot page through children"
            )
        after = page[-1].sort_key


def family_range(parent_key: Sequence[Any]) -> KeyBounds:
    """The sort-key range of a parent's children: their keys extend the parent's (hex) key, and
    ``g`` sorts after every hex digit. (A key diff's own ranges may cut a family in two.)"""
    own = sort_key(parent_key)
    return own, own + "g"


def child_deletes(
    target: TargetReader,
    index: str,
    plan: IndexPlan,
    relations: Collection[str],
    position: int,
    parents: Collection[Sequence[Any]] | None = None,
    key_range: KeyBounds | None = None,
) -> list[BulkItem]:
    """Deletes, at *position*, of the children of *relations* the index holds (in *key_range*;
    or of the parents with these keys only, when given). Children with a version column of their own cannot be
    deleted at a log position (their documents carry the row's version): they are left, and a
    warning says so."""
    versioned = {r.name for r in plan.joins if r.name in relations and r.version is not None}
    if versioned:
        log.warning(
            "%s: children of relation(s) %s carry their rows' versions: those whose rows are gone stay until a reindex",
            plan.alias,
            ", ".join(sorted(versioned)),
        )
    wanted = [name for name in relations if name not in versioned]
    ranges: list[KeyBounds | None] = [key_range] if parents is None else [family_range(k) for k in parents]
    return [
        BulkItem(doc_id, op="delete", routing=parent, version=position)
        for key_range in ranges
        for doc_id, parent in indexed_children(target, index, plan, wanted, key_range)
    ]


def current_parents(plan: IndexPlan, source: Source, doc_ids: Iterable[str]) -> list[Key]:
    """The root keys of the parents that the rows of these join children (by document id) have
    now: the rows still there after their old copies were deleted (re-inserted, moved)."""
    wanted: dict[str, list[Key]] = {}
    by_name = {rel.name: rel for rel in plan.joins}
    for doc_id in doc_ids:
        name, _, key_text = doc_id.partition(":")
        rel = by_name.get(name)
        if rel is None:
            continue
        key = parse_key(rel.table, rel.id_columns, key_text)  # typed from the id's text
        if key is not None:
            wanted.setdefault(name, []).append(key)
    parents: dict[Key, None] = {}
    for name, keys in wanted.items():
        rel = by_name[name]
        for row in source.fetch_where_in(rel.table, rel.id_columns, keys, rel.remote_key, rel.remote_key):
            parent = coerce_key(plan.table, plan.id_columns, tuple(row))
            if parent is not None and None not in parent:
                parents[parent] = None
    return list(parents)
