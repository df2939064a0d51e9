"""From changed rows to the root keys of the documents they touch: the relation tree, walked up.

A document holds its root row and the rows its relations reach. A change to any of those rows
must rebuild it, so each table of the tree is mapped to the routes that lead from it to the
root: a review's author renamed leads users -> reviews (``author_id``) -> products
(``product_id``). Every step matches the child's ``remote_key`` values against the parent's
``local_key``; where the parent is not the root, its current rows are read to take the next step
(one batched ``IN`` query per step). Both the old and the new row image are walked, so a review
moved from one product to another rebuilds both.

A step needs the child's ``remote_key`` values from the log. A delete logs only the replica
identity (the primary key by default), so a relation whose ``remote_key`` is not part of it
cannot find its parent after a delete: :meth:`FanOut.link_columns` names what each table must
reveal, and the PostgreSQL source refuses tables whose identity lacks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkindex.documents.plan import IndexPlan, RelationPlan
from sparkindex.sources.base import Key, Source, coerce_key
from sparkindex.sources.change_model import Change


@dataclass(frozen=True)
class Route:
    """The relations from the root down to one table, and whether any of them is deferred."""

    table: str
    path: tuple[RelationPlan, ...]
    deferred: bool
    where: str  # the config key path of the last relation (for messages)


@dataclass
class RootKeys:
    """Root keys a set of changes touches, each with the newest position that touched it."""

    keys: dict[Key, int]
    #: changes held back for a deferred refresh: (table, row images, position)
    deferred: list[Change]

    def add(self, key: Key, position: int) -> None:
        if self.keys.get(key, -1) < position:
            self.keys[key] = position


class FanOut:
    """The reverse walk for one index plan."""

    def __init__(self, plan: IndexPlan, source: Source, where: str = "") -> None:
        self.plan = plan
        self.source = source
        self.routes: dict[str, list[Route]] = {}
        self._collect(plan.relations, (), False, f"{where}.relations" if where else "relations")

    def _collect(
        self, relations: Sequence[RelationPlan], path: tuple[RelationPlan, ...], deferred: bool, where: str
    ) -> None:
        for i, rel in enumerate(relations):
            route_path = (*path, rel)
            is_deferred = deferred or _deferred(self.plan, route_path)
            here = f"{where}[{i}]"
            self.routes.setdefault(rel.table.name, []).append(Route(rel.table.name, route_path, is_deferred, here))
            self._collect(rel.children, route_path, is_deferred, f"{here}.relations")

    @property
    def root_table(self) -> str:
        return self.plan.table.name

    def tables(self) -> list[str]:
        """Every table whose changes can touch a document of this index."""
        return list(dict.fromkeys([self.root_table, *self.routes]))

    def link_columns(self) -> dict[str, tuple[list[str], str]]:
        """Per table: the columns a DELETE must reveal to find its documents, and where they are
        configured. The root table must reveal the id; a related table its ``remote_key``."""
        out: dict[str, tuple[list[str], str]] = {self.root_table: (list(self.plan.id_columns), "id")}
        for table, routes in self.routes.items():
            cols = list(out.get(table, ([], ""))[0])
            for route in routes:
                cols.extend(c for c in route.path[-1].remote_key if c not in cols)
            out[table] = (cols, routes[0].where)
        return out

    # -- the walk ----------------------------------------------------------------------------------
    def root_keys(self, changes: Iterable[Change], include_deferred: bool = False) -> RootKeys:
        """The root keys *changes* touch; changes below a deferred relation are set aside
        (unless *include_deferred*: the deferred refresh itself)."""
        out = RootKeys({}, [])
        # Per route, the link values to walk up and the newest position each came with.
        pending: dict[tuple[str, int], dict[Key, int]] = {}
        for change in changes:
            if change.table == self.root_table:
                for image in change.values():
                    key = _take(image, self.plan.id_columns)
                    if key is not None:
                        out.add(key, change.position)
            for n, route in enumerate(self.routes.get(change.table, ())):
                if route.deferred and not include_deferred:
                    out.deferred.append(change)
                    continue
                values = pending.setdefault((change.table, n), {})
                for image in change.values():
                    link = _take(image, route.path[-1].remote_key)
                    if link is not None and values.get(link, -1) < change.position:
                        values[link] = change.position
        for (table, n), values in pending.items():
            self.walk_up(self.routes[table][n], values, out)
        return out

    def walk_up(self, route: Route, values: dict[Key, int], out: RootKeys) -> None:
        """Follow *values* (the last relation's ``remote_key`` values, with positions) to the root."""
        for depth in range(len(route.path) - 1, -1, -1):
            if not values:
                return
            rel = route.path[depth]
            if depth == 0:
                parent_table, wanted = self.plan.table, self.plan.id_columns
            else:
                parent_table, wanted = route.path[depth - 1].table, route.path[depth - 1].remote_key
            if list(rel.local_key) == list(wanted):
                continue  # the parent's next link is the very value we hold
            values = self._step(parent_table.name, rel.local_key, wanted, values)
        for key, position in values.items():
            out.add(key, position)

    def _step(self, table: str, match: Sequence[str], wanted: Sequence[str], values: dict[Key, int]) -> dict[Key, int]:
        """Rows of *table* whose *match* columns hold one of *values*: their *wanted* values."""
        info = self.source.table(table)
        coerced: dict[Key, int] = {}
        for key, position in values.items():
            typed = coerce_key(info, match, key)
            if typed is not None and coerced.get(typed, -1) < position:
                coerced[typed] = position
        read = list(dict.fromkeys([*match, *wanted]))
        rows = self.source.fetch_where_in(info, match, list(coerced), read, read)
        mpos = [read.index(c) for c in match]
        wpos = [read.index(c) for c in wanted]
        out: dict[Key, int] = {}
        for row in rows:
            position = coerced.get(tuple(row[i] for i in mpos), 0)
            key = tuple(row[i] for i in wpos)
            if None not in key and out.get(key, -1) < position:
                out[key] = position
        return out


def _deferred(plan: IndexPlan, path: tuple[RelationPlan, ...]) -> bool:
    """Whether the relation at *path* is marked ``deferred: true`` in the configuration."""
    configs: Sequence[Any] = plan.config.relations
    cfg: Any = None
    for rel in path:
        cfg = next((c for c in configs if c.name == rel.name), None)
        if cfg is None:
            return False
        configs = cfg.relations
    return bool(cfg is not None and cfg.deferred)


def _take(image: dict[str, Any], columns: Sequence[str]) -> Key | None:
    """The values of *columns* in a row image, or None when the image lacks one (or holds NULL)."""
    try:
        key = tuple(image[c] for c in columns)
    except KeyError:
        return None
    return None if None in key else key
