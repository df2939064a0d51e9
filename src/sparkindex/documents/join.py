"""Parent-child documents (``type: join`` relations): child rows as documents of their own.

Search engines join parents and children that live in one index and on one shard. So each row of
a join relation becomes a document in its parent's index:

* its id is ``<relation name>:<document id of its primary key>`` (:func:`child_id`; composite keys
  escaped as :func:`sparkindex.keys.document_id` does, and relation names cannot hold ``:``), so
  it never equals the id of another child. A *parent* id is the raw key text and could be any
  text: a parent whose id begins with ``<relation name>:`` would share the id space, so that row is
  reported as a :class:`~sparkindex.errors.DocumentError` (dead-lettered) instead of overwriting a
  child or being overwritten;
* its routing is its parent's document id, computed from its own foreign key (which references
  the index's id columns, checked at planning) so that it lands on the parent's shard;
* its body is ``{<relation name>: {columns, relations}, <join field>: {"name": <relation name>,
  "parent": <parent id>}}``: the relation's fields sit under its name, so they never clash with
  the parents' fields in the one mapping, and parents carry ``<join field>: <parent name>``;
* its sort key is its parent's followed by the relation name and its own key, so children sort
  right after their parent and any key range between parent keys holds whole families.

Children are read per page of parents with batched ``IN`` lists, like nested relations, and
written with the page: a partition's cursor covers the children of the parents before it, and
the counts the partitions acknowledge include them (they are documents the index holds).

A child whose foreign key changes moves to another parent: its id stays (it is the child's own
key) while its routing changes, so the copy under the old routing must be deleted, then the row
indexed under the new one. A full reindex writes into a fresh index version and never meets the
old copy; change capture, which sees the old and new foreign key of the row, deletes with
``routing=<old parent id>`` and indexes with the new (:func:`routing_of` computes both from a row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkindex.documents.plan import RelationPlan
from sparkindex.keys import document_id, sort_key, split_document_id

Key = tuple[Any, ...]


def child_id(relation: str, key: Sequence[Any]) -> str:
    """The document id of the join child with primary key *key* in relation *relation*."""
    return f"{relation}:{document_id(key)}"


def split_child_id(doc_id: str, key_columns: int) -> tuple[str, list[str | None]]:
    """Undo :func:`child_id`: the relation name and the key parts as text (None for NULL)."""
    relation, sep, rest = doc_id.partition(":")
    if not sep:
        raise ValueError(f"document id {doc_id!r} is not a join child's id (<relation>:<key>)")
    return relation, split_document_id(rest, key_columns)


def routing_of(parent_key: Sequence[Any]) -> str:
    """The routing of a child whose foreign key holds *parent_key*: the parent's document id."""
    return document_id(parent_key)


def child_sort_key(parent_key: Sequence[Any], relation: str, key: Sequence[Any]) -> str:
    """Sorts after the parent's own sort key and before the next parent's (each part encodes
    itself whole, so the parent's key is a prefix of its children's)."""
    return sort_key((*parent_key, relation, *key))


def join_value(relation: RelationPlan, parent_id: str) -> dict[str, str]:
    return {"name": relation.name, "parent": parent_id}


def parent_prefixes(relations: Sequence[RelationPlan]) -> tuple[str, ...]:
    """Id prefixes no parent id may begin with (they are the children's)."""
    return tuple(f"{r.name}:" for r in relations)
