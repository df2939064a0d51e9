"""Inferring indexes from the schema graph: which tables are roots, and what each document holds.

The rules, each chosen so that the generated pipeline runs as it is and its documents stay
bounded:

* Roots (by default): tables no other table references through a NOT NULL foreign key, largest
  first. Such a table is nobody's detail, so its rows are the things people search for. A pure
  link table is never a root, and its references do not count: ``book`` and ``author`` stay
  roots when only ``book_author`` references them.
* Many-to-one references become ``object`` relations, followed in chains up to the depth limit.
* Tables whose foreign key references the root become ``nested`` relations, ordered by their
  key (so that the array, and the document's hash, is the same on every build); below a nested
  child only its many-to-one chains are followed (one level of one-to-many keeps documents
  bounded). A pure link table nested this way reaches the other side as an object: that is a
  many-to-many relation, nested through the link table.
* A reference to a table already on the path is cut (a self-reference, or a cycle), as is
  whatever lies beyond the depth limit; a child without a key is not nested (its rows have no
  order). Every cut is kept as a :class:`Cut`, which the pipeline file shows as a comment.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Literal

from sparkindex.errors import UsageError
from sparkindex.scaffold.columns import ColumnChoice, choose_columns
from sparkindex.scaffold.reflect import Reference, SchemaGraph, TableFacts

CutKind = Literal["depth", "cycle", "self", "self-children", "no key"]


@dataclass(frozen=True)
class Cut:
    """A reference that was not followed, and why (``text`` is the comment)."""

    kind: CutKind
    table: str
    columns: tuple[str, ...]
    ref_table: str
    #: the reference points at the document's table (a one-to-many that was not nested)
    nested: bool
    text: str

    @property
    def skipped(self) -> str:
        """The table that is not in the document because of this cut."""
        return self.table if self.nested else self.ref_table


@dataclass
class RelationDraft:
    name: str
    kind: Literal["object", "nested"]
    table: str
    local_key: tuple[str, ...]
    remote_key: tuple[str, ...]
    columns: ColumnChoice
    order_by: tuple[str, ...] | None = None
    children: list[RelationDraft] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    #: nested through a pure link table: the table on its other side
    link_to: str | None = None
    #: comments on the relation itself (what kind of relation it is)
    notes: list[str] = field(default_factory=list)


@dataclass
class IndexDraft:
    alias: str
    table: str
    rows: int
    rows_estimated: bool
    id: tuple[str, ...]
    key_source: str | None
    columns: ColumnChoice
    relations: list[RelationDraft] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    #: why the table cannot be an index (then the index is written commented out)
    reason: str | None = None
    #: the row filter ``init --where`` gave, accepted by the database
    where: str | None = None

    @property
    def usable(self) -> bool:
        return self.reason is None


# -- roots --------------------------------------------------------------------------------------------
def choose_roots(graph: SchemaGraph, wanted: list[str] | None = None) -> list[str]:
    """The root tables: *wanted* (deduplicated, in the given order), or the default rule."""
    if wanted:
        for name in wanted:
            if name not in graph.tables:
                raise UsageError(f"--table {name!r}: table not found in the source ({_known(graph, name)})")
        return list(dict.fromkeys(wanted))
    referenced: set[str] = set()
    for table in graph.tables.values():
        if graph.is_link(table.name):
            continue
        referenced.update(r.ref_table for r in table.references if r.ref_table != table.name and not r.nullable)
    roots = [t for t in graph.tables.values() if t.name not in referenced and not graph.is_link(t.name)]
    if not roots:
        raise UsageError(
            "no root table: every table is referenced by another through a NOT NULL foreign key (a cycle); "
            "name the tables to index with --table"
        )
    return [t.name for t in sorted(roots, key=lambda t: (-t.rows, t.name))]


def _known(graph: SchemaGraph, name: str) -> str:
    names = graph.names()
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    listed = ", ".join(names) if len(names) <= 40 else f"{len(names)} tables"
    return f"{hint}tables: {listed}"


def alias_for(table: str, taken: set[str]) -> str:
    """An alias the config accepts (``^[a-z0-9][a-z0-9_-]*$``), unique among *taken*."""
    base = re.sub(r"[^a-z0-9_\-]", "_", table.lower()).lstrip("_-")[:120] or "index"
    alias, n = base, 2
    while alias in taken:
        alias, n = f"{base}_{n}", n + 1
    taken.add(alias)
    return alias


# -- one index ------------------------------------------------------------------------------------------
def infer_index(graph: SchemaGraph, root: str, depth: int, alias: str | None = None) -> IndexDraft:
    table = graph.table(root)
    draft = IndexDraft(
        alias or alias_for(root, set()),
        root,
        table.rows,
        table.rows_estimated,
        table.key or (),
        table.key_source,
        choose_columns(table),
    )
    if table.key is None:
        draft.reason = (
            f"table {root} has no primary key and no unique key whose columns are all NOT NULL, so nothing tells "
            "its rows apart for document ids (add a primary key, then run sparkindex init again)"
        )
        return draft
    walk = _Walk(graph, depth)
    names = _Names(table)
    for ref in _outgoing(table):
        walk.object(ref, 1, (root,), (root,), names, draft.relations, draft.cuts)
    for ref in graph.referencing(root):
        walk.nested(ref, root, names, draft.relations, draft.cuts)
    return draft


def _outgoing(table: TableFacts, skip: Reference | None = None) -> list[Reference]:
    """The table's many-to-one references in column order (the order the table declares)."""
    position = {c: i for i, c in enumerate(table.column_names)}
    refs = [r for r in table.references if r != skip]
    return sorted(refs, key=lambda r: ([position[c] for c in r.columns], r.ref_table))


class _Walk:
    def __init__(self, graph: SchemaGraph, depth: int) -> None:
        self.graph = graph
        self.depth = depth

    def object(
        self,
        ref: Reference,
        level: int,
        path: tuple[str, ...],
        labels: tuple[str, ...],
        names: _Names,
        into: list[RelationDraft],
        cuts: list[Cut],
    ) -> None:
        what = ref.describe()
        if ref.ref_table == ref.table:
            text = f"{what} not followed: a self-reference ({ref.table} references itself)"
            cuts.append(_cut("self", ref, False, text))
            return
        if ref.ref_table in path:
            text = f"{what} not followed: {ref.ref_table} is already on this path ({' > '.join(labels)}), a cycle"
            cuts.append(_cut("cycle", ref, False, text))
            return
        if level > self.depth:
            cuts.append(_cut("depth", ref, False, self._depth_text(what)))
            return
        target = self.graph.table(ref.ref_table)
        name = names.object_name(ref)
        rel = RelationDraft(name, "object", target.name, ref.columns, ref.ref_columns, choose_columns(target))
        inner = _Names(target)
        for child in _outgoing(target):
            self.object(child, level + 1, (*path, target.name), (*labels, name), inner, rel.children, rel.cuts)
        into.append(rel)

    def nested(self, ref: Reference, root: str, names: _Names, into: list[RelationDraft], cuts: list[Cut]) -> None:
        what = f"{ref.table} ({ref.describe()})"
        if ref.table == root:
            text = f"{ref.describe()} not nested: a self-reference (rows of {root} that reference this one)"
            cuts.append(_cut("self-children", ref, True, text))
            return
        if self.depth < 1:
            cuts.append(_cut("depth", ref, True, self._depth_text(what, nested=True)))
            return
        child = self.graph.table(ref.table)
        if child.key is None:
            text = f"{what} not nested: {ref.table} has no primary key or unique NOT NULL key to order its rows by"
            cuts.append(_cut("no key", ref, True, text))
            return
        name = names.nested_name(ref, self.graph)
        rel = RelationDraft(
            name, "nested", child.name, ref.ref_columns, ref.columns, choose_columns(child), order_by=child.key
        )
        order = ", ".join(child.key)
        if self.graph.is_link(child.name):
            rel.link_to = next(r.ref_table for r in child.references if r != ref)
            rel.notes.append(
                f"many-to-many: {root} <-> {rel.link_to} through the link table {child.name} "
                f"(one element per link row, ordered by {order})"
            )
        else:
            match = f"{_cols(ref.columns)} = this {root}'s {_cols(ref.ref_columns)}"
            rel.notes.append(f"one-to-many: the {child.name} rows with {match}, ordered by {order}")
        inner = _Names(child)
        for other in _outgoing(child, skip=ref):
            self.object(other, 2, (root, child.name), (root, name), inner, rel.children, rel.cuts)
        into.append(rel)

    def _depth_text(self, what: str, nested: bool = False) -> str:
        done, does = ("nested", "nests") if nested else ("followed", "follows")
        return f"{what} not {done}: depth limit {self.depth} (sparkindex init --depth {self.depth + 1} {does} it)"


def _cols(columns: tuple[str, ...]) -> str:
    return columns[0] if len(columns) == 1 else f"({', '.join(columns)})"


def _cut(kind: CutKind, ref: Reference, nested: bool, text: str) -> Cut:
    return Cut(kind, ref.table, ref.columns, ref.ref_table, nested, text)


_ID_SUFFIX = (re.compile(r"^(.+?)_id$", re.I), re.compile(r"^(.*[a-z0-9])Id$"))


class _Names:
    """Relation names that are neither a column of their table nor another relation's name."""

    def __init__(self, table: TableFacts) -> None:
        self.table = table
        self.taken = set(table.column_names)

    def object_name(self, ref: Reference) -> str:
        candidates: list[str] = []
        if len(ref.columns) == 1:
            for pattern in _ID_SUFFIX:
                m = pattern.match(ref.columns[0])
                if m:
                    candidates.append(m[1])
                    break
        if sum(1 for r in self.table.references if r.ref_table == ref.ref_table) == 1:
            candidates.append(ref.ref_table)
        candidates.append(f"{ref.ref_table}_by_{'_'.join(ref.columns)}")
        return self._take(candidates)

    def nested_name(self, ref: Reference, graph: SchemaGraph) -> str:
        siblings = [r for r in graph.referencing(ref.ref_table) if r.table == ref.table]
        candidates = [ref.table] if len(siblings) == 1 else []
        candidates.append(f"{ref.table}_by_{'_'.join(ref.columns)}")
        return self._take(candidates)

    def _take(self, candidates: list[str]) -> str:
        cleaned = [c.replace(".", "_") for c in candidates]
        for name in cleaned:
            if name not in self.taken:
                self.taken.add(name)
                return name
        base, n = cleaned[-1], 2
        while f"{base}_{n}" in self.taken:
            n += 1
        self.taken.add(f"{base}_{n}")
        return f"{base}_{n}"
