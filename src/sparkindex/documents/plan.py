"""Resolving an index's configuration against the live schema.

This is where config meets reality: unknown tables or columns and relations without a usable
foreign key are reported here, with the config key path, before any work is planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.documents.key_rules import check_unique_id, check_version_column
from sparkindex.documents.shape import (
    PLAIN,
    Shape,
    check_keys_visible,
    index_renames,
    level_renames,
    resolve_shape,
    shaped_view,
)
from sparkindex.errors import ConfigError, PermanentError
from sparkindex.sources.base import Source, TableInfo


@dataclass
class RelationPlan:
    name: str
    kind: str  # "object" | "nested" | "join"
    table: TableInfo
    emit: list[str]  # columns that become document fields
    local_key: list[str]  # on the parent
    remote_key: list[str]  # on this table
    order_by: list[str]
    children: list[RelationPlan] = field(default_factory=list)
    #: join only: the columns whose values make each child document's id (the table's primary key)
    id_columns: list[str] = field(default_factory=list)
    #: join only: the column holding each child document's external version
    version: str | None = None
    #: the rows and fields this relation takes from its table (:mod:`.shape`)
    shape: Shape = PLAIN

    @property
    def keys(self) -> list[str]:
        """The columns read under their own names: every key the relation tree needs."""
        keys = [*self.remote_key, *self.id_columns, *(k for c in self.children for k in c.local_key)]
        return [*keys, *([self.version] if self.version else [])]

    @property
    def read(self) -> list[str]:
        """Columns to select: emitted ones plus every key the relation tree needs."""
        return _read_columns(self.emit, self.keys)

    @property
    def rows(self) -> TableInfo:
        """The table as this relation's documents read it (:func:`~.shape.shaped_view`)."""
        return _view(self, self.table, self.shape)

    def __getstate__(self) -> dict[str, object]:
        return _without_view(self.__dict__)


@dataclass
class IndexPlan:
    config: IndexConfig
    table: TableInfo
    id_columns: list[str]
    emit: list[str]
    #: every relation, ``join`` ones included (they decide the documents too); builders fold
    #: :attr:`embedded` into each document and make documents of their own from :attr:`joins`
    relations: list[RelationPlan]
    #: the root-table column holding each document's external version
    version: str | None = None
    #: with join relations: the join field's name, and the parents' name in it
    join_field: str | None = None
    join_parent: str | None = None
    #: the rows and fields the documents take from the root table (:mod:`.shape`)
    shape: Shape = PLAIN
    #: the root-table column whose value routes each document (``_routing``)
    routing: str | None = None

    @property
    def rows(self) -> TableInfo:
        """The root table as the documents read it (:func:`~.shape.shaped_view`); ``table`` is
        the table itself, for reads that must see every row."""
        return _view(self, self.table, self.shape)

    def __getstate__(self) -> dict[str, object]:
        return _without_view(self.__dict__)

    @property
    def shaped(self) -> bool:
        """Whether any level filters, renames or computes (the documents are not the tables')."""
        return not self.shape.plain or any(_shaped(r) for r in self.relations)

    @property
    def alias(self) -> str:
        return self.config.alias

    @property
    def embedded(self) -> list[RelationPlan]:
        return [r for r in self.relations if r.kind != "join"]

    @property
    def joins(self) -> list[RelationPlan]:
        return [r for r in self.relations if r.kind == "join"]

    @property
    def keys(self) -> list[str]:
        """The root columns read under their own names: ids, relations' keys, version, routing."""
        keys = [*self.id_columns, *(k for r in self.relations for k in r.local_key)]
        return [*keys, *([self.version] if self.version else []), *([self.routing] if self.routing else [])]

    @property
    def read(self) -> list[str]:
        return _read_columns(self.emit, self.keys)


_VIEW = "_shaped_view"


def _view(level: IndexPlan | RelationPlan, table: TableInfo, shape: Shape) -> TableInfo:
    """The level's shaped view, built once per process (never pickled: a plan shipped to a
    Spark task builds it again where it is read)."""
    view = level.__dict__.get(_VIEW)
    if view is None:
        view = level.__dict__[_VIEW] = shaped_view(table, shape)
    return view


def _without_view(state: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in state.items() if k != _VIEW}


def _shaped(rel: RelationPlan) -> bool:
    return not rel.shape.plain or any(_shaped(c) for c in rel.children)


def _read_columns(emit: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The emitted columns first, in order, then the keys not among them: builders make each
    row's dict by zipping the emitted names with the row (documents/builder.py::_dicts)."""
    out = list(emit)
    for k in keys:
        if k not in out:
            out.append(k)
    return out


def _fk_between(child: TableInfo, parent: TableInfo) -> list[tuple[list[str], list[str]]]:
    return [(list(fk.columns), list(fk.ref_columns)) for fk in child.foreign_keys if fk.ref_table == parent.name]


def _resolve_relation(
    source: Source,
    parent: TableInfo,
    cfg: RelationConfig,
    where: str,
    parent_id: Sequence[str] | None = None,
    renamed: Mapping[str, str] | None = None,
    path: str = "",
) -> RelationPlan:
    """*parent_id*: the index's id columns when *cfg* sits directly under the index (only there
    may a relation be a join). *renamed*: the index's renames by dotted path; *path*: the dotted
    path of the relation's parent ("" for the root)."""
    renamed = renamed or {}
    path = f"{path}.{cfg.name}" if path else cfg.name
    table = source.table(cfg.table, f"{where}.table")
    if cfg.type == "join" and parent_id is None:
        raise ConfigError(
            f"{where}.type: a join relation makes documents of its own in the index, routed to the index's "
            "documents; list it directly under the index's relations, not inside another relation"
        )
    if cfg.version is not None and cfg.type != "join":
        raise ConfigError(
            f"{where}.version: only a join relation's rows are documents with versions of their own; "
            "the index's documents take theirs from the index's `version`"
        )
    local, remote = cfg.local_key, cfg.remote_key
    if cfg.type == "object":
        if local is None:
            fks = _fk_between(parent, table)
            if len(fks) != 1:
                raise ConfigError(
                    f"{where}: cannot infer local_key: table {parent.name!r} has {len(fks)} foreign keys "
                    f"to {table.name!r}; set local_key (a column of {parent.name!r}) explicitly"
                )
            local, inferred_remote = fks[0]
            remote = remote or inferred_remote
        remote = remote or list(table.primary_key)
    elif cfg.type == "join" and remote is None and local is None:
        # Routing is the parent's document id, so the child must reference the parent's id.
        assert parent_id is not None
        remote = _reference_to(table, parent, list(parent_id), where)
        local = list(parent_id)
    else:
        if remote is None:
            fks = _fk_between(table, parent)
            if len(fks) != 1:
                raise ConfigError(
                    f"{where}: cannot infer remote_key: table {table.name!r} has {len(fks)} foreign keys "
                    f"to {parent.name!r}; set remote_key (a column of {table.name!r}) explicitly"
                )
            remote, inferred_local = fks[0]
            local = local or inferred_local
        local = local or (list(parent_id) if cfg.type == "join" and parent_id else list(parent.primary_key))
    if not local or not remote:
        raise ConfigError(f"{where}: table {table.name!r} has no primary key; set local_key and remote_key")
    if len(local) != len(remote):
        raise ConfigError(f"{where}: local_key {local} and remote_key {remote} differ in length")
    parent.require_columns(local, f"{where}.local_key")
    table.require_columns(remote, f"{where}.remote_key")
    emit, shape = resolve_shape(
        source,
        table,
        cfg.columns,
        cfg.exclude,
        level_renames(renamed, path),
        cfg.computed,
        cfg.where,
        where,
        list(renamed),
    )
    order_by = cfg.order_by or list(table.primary_key) or remote
    table.require_columns(order_by, f"{where}.order_by")
    children = [
        _resolve_relation(source, table, child, f"{where}.relations[{i}]", None, renamed, path)
        for i, child in enumerate(cfg.relations)
    ]
    _check_names(emit, children, where)
    rel = RelationPlan(cfg.name, cfg.type, table, emit, list(local), list(remote), list(order_by), children)
    rel.shape = shape
    if cfg.type == "join":
        assert parent_id is not None
        _check_join(rel, cfg, parent, list(parent_id), where)
    check_keys_visible(shape, [*rel.keys, *rel.order_by], where, table.name)
    return rel


def _reference_to(child: TableInfo, parent: TableInfo, parent_id: list[str], where: str) -> list[str]:
    """The child's columns of its one foreign key to *parent* that references the parent's id."""
    fks = [cols for cols, ref in _fk_between(child, parent) if (ref or list(parent.primary_key)) == parent_id]
    if len(fks) != 1:
        raise ConfigError(
            f"{where}: cannot infer remote_key: table {child.name!r} has {len(fks)} foreign keys to the id "
            f"({', '.join(parent_id)}) of {parent.name!r}; set remote_key (columns of {child.name!r}) explicitly"
        )
    return fks[0]


def _check_join(rel: RelationPlan, cfg: RelationConfig, parent: TableInfo, parent_id: list[str], where: str) -> None:
    if ":" in rel.name:
        raise ConfigError(
            f"{where}.name: {rel.name!r} contains ':'; a join relation's name begins its documents' ids "
            f"('<name>:<key>') and must not contain ':'"
        )
    if rel.local_key != parent_id:
        raise ConfigError(
            f"{where}.local_key: a join child is routed to its parent's document id, so it must reference the "
            f"index's id columns ({', '.join(parent_id)}) of table {parent.name!r}, not {', '.join(rel.local_key)}"
        )
    if not rel.table.primary_key:
        raise ConfigError(
            f"{where}.table: table {rel.table.name!r} has no primary key; the rows of a join relation become "
            "documents whose ids are their primary keys"
        )
    rel.id_columns = list(rel.table.primary_key)
    if cfg.version is not None:
        check_version_column(rel.table, cfg.version, f"{where}.version")
        rel.version = cfg.version


def _check_names(emit: Sequence[str], relations: Sequence[RelationPlan], where: str) -> None:
    seen: set[str] = set()
    for i, rel in enumerate(relations):
        if rel.name in emit:
            raise ConfigError(
                f"{where}.relations[{i}].name: {rel.name!r} is also a column; choose another name "
                f"or leave the column out with 'columns'"
            )
        if rel.name in seen:
            raise ConfigError(f"{where}.relations[{i}].name: {rel.name!r} names an earlier relation too")
        seen.add(rel.name)


def _check_join_field(plan: IndexPlan, where: str) -> None:
    joins = plan.joins
    if not joins:
        if plan.config.join is not None:
            raise ConfigError(f"{where}.join: no relation of this index has type: join")
        return
    join = plan.config.join
    plan.join_field = join.field if join is not None else "join"
    plan.join_parent = (join.parent if join is not None else None) or plan.table.name
    taken = {*plan.emit, *(r.name for r in plan.relations)}
    if plan.join_field in taken:
        raise ConfigError(
            f"{where}.join.field: the join field {plan.join_field!r} is also a column or relation of the "
            "documents; name another join field"
        )
    if plan.join_parent in {r.name for r in joins}:
        raise ConfigError(
            f"{where}.join.parent: the parents' name {plan.join_parent!r} is also a join relation's name; "
            "the join field could not tell parents from children"
        )


def resolve_index(source: Source, cfg: IndexConfig, where: str) -> IndexPlan:
    table = source.table(cfg.table, f"{where}.table")
    id_columns = list(cfg.id) if cfg.id else list(table.primary_key)
    if not id_columns:
        raise ConfigError(f"{where}.id: table {table.name!r} has no primary key; name the id column(s)")
    table.require_columns(id_columns, f"{where}.id")
    check_unique_id(table, id_columns, f"{where}.id")
    renamed = index_renames(cfg, where)
    emit, shape = resolve_shape(
        source, table, cfg.columns, cfg.exclude, level_renames(renamed, ""), cfg.computed, cfg.where, where
    )
    relations = [
        _resolve_relation(source, table, r, f"{where}.relations[{i}]", id_columns, renamed)
        for i, r in enumerate(cfg.relations)
    ]
    _check_names(emit, relations, where)
    plan = IndexPlan(cfg, table, id_columns, emit, relations, shape=shape)
    if cfg.version is not None:
        check_version_column(table, cfg.version, f"{where}.version")
        plan.version = cfg.version
    if cfg.routing is not None:
        table.require_columns([cfg.routing], f"{where}.routing")
        plan.routing = cfg.routing
    _check_join_field(plan, where)
    _check_shape_with_joins(plan, where)
    check_keys_visible(shape, plan.keys, where, table.name)
    return plan


def _check_shape_with_joins(plan: IndexPlan, where: str) -> None:
    """Routing and soft deletes are for the index's own documents; join children are routed to
    their parent and removed with it."""
    if not plan.joins:
        return
    if plan.routing is not None:
        raise ConfigError(
            f"{where}.routing: an index with join relations routes each child to its parent's document id; "
            "a routing column of the parents would separate them from their children"
        )
    if plan.config.deletes == "soft":
        raise ConfigError(
            f"{where}.deletes: soft deletes keep the index's own documents as tombstones; an index with join "
            "relations (child documents of their own) supports deletes: hard only"
        )


#: how many sets of shipped plans a worker process keeps builders for (jobs, sync runs, verify
#: runs): it serves one at a time, so the oldest beyond these are dropped
KEPT_PLAN_SETS = 4


def shipped_plan(plans: Mapping[str, IndexPlan], alias: str) -> IndexPlan:
    """The plan the driver shipped for *alias* to a Spark task (plans are resolved once, by the
    driver, and never again from the schema a worker finds)."""
    plan = plans.get(alias)
    if plan is None:
        shipped = ", ".join(plans) or "none"
        raise PermanentError(f"no document plan was shipped for alias {alias!r} (shipped: {shipped})")
    return plan
