"""Join children that change capture must delete itself.

Rebuilding a parent by key writes the children its rows have now (:mod:`sparkindex.documents.join`);
it cannot delete the documents of children that are no longer there, because a child is a
document of its own, routed to its parent's shard. So the apply step deletes, before it rebuilds:

* the document of a child row that was deleted, under the routing its old row image gives;
* the old copy of a child row whose key or parent changed (a moved child): its id or routing is
  no longer what the rebuild writes, and on an engine with several shards the old copy would stay
  on the old parent's shard beside the new one;
* every child of a truncated join table, and the children of parents a key diff found gone,
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
from typing import Any

from sparkindex.documents.join import child_id, routing_of
from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.documents.source_lookup import parse_key
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


def removed_children(plan: IndexPlan, changes: Sequence[Change]) -> list[BulkItem]:
    """Deletes of the old copies of join children that *changes* deleted or moved."""
    by_table = {rel.table.name: rel for rel in plan.joins}
    items: list[BulkItem] = []
    for change in changes:
        rel = by_table.get(change.table)
        if rel is None or change.op not in ("delete", "update") or not change.old:
            continue
        old = _identity(plan, rel, change.old)
        if old is None:
            continue  # the old image lacks the key or the parent (no REPLICA IDENTITY FULL)
        if change.op == "update" and change.new is not None and _identity(plan, rel, change.new) == old:
            continue  # same id, same parent: the parent's rebuild rewrites it in place
        doc_id, routing = old
        items.append(BulkItem(doc_id, op="delete", routing=routing, version=_version(rel, doc_id, change)))
    return items


def _identity(plan: IndexPlan, rel: RelationPlan, image: dict[str, Any]) -> tuple[str, str] | None:
    """(document id, routing) of the child whose row image is *image*."""
    if any(c not in image for c in [*rel.id_columns, *rel.remote_key]):
        return None
    key = coerce_key(rel.table, rel.id_columns, tuple(image[c] for c in rel.id_columns))
    parent = coerce_key(plan.table, plan.id_columns, tuple(image[c] for c in rel.remote_key))
    if key is None or parent is None or None in parent:
        return None
    return child_id(rel.name, key), routing_of(parent)


def _version(rel: RelationPlan, doc_id: str, change: Change) -> int:
    if rel.version is None:
        return change.position
    if not change.old or rel.version not in change.old:
        log.warning("%s: the old row image has no %r: deleted at the log position instead", doc_id, rel.version)
        return change.position
    typed = coerce_key(rel.table, [rel.version], (change.old[rel.version],))
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
