"""Resolving an index's configuration against the live schema.

This is where config meets reality: unknown tables or columns and relations without a usable
foreign key are reported here, with the config key path, before any work is planned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkindex.config.model import IndexConfig, RelationConfig
from sparkindex.errors import ConfigError
from sparkindex.sources.base import Source, TableInfo


@dataclass
class RelationPlan:
    name: str
    kind: str  # "object" | "nested"
    table: TableInfo
    emit: list[str]  # columns that become document fields
    local_key: list[str]  # on the parent
    remote_key: list[str]  # on this table
    order_by: list[str]
    children: list[RelationPlan] = field(default_factory=list)

    @property
    def read(self) -> list[str]:
        """Columns to select: emitted ones plus every key the relation tree needs."""
        return _read_columns(self.emit, [*self.remote_key, *(k for c in self.children for k in c.local_key)])


@dataclass
class IndexPlan:
    config: IndexConfig
    table: TableInfo
    id_columns: list[str]
    emit: list[str]
    relations: list[RelationPlan]

    @property
    def alias(self) -> str:
        return self.config.alias

    @property
    def read(self) -> list[str]:
        return _read_columns(self.emit, [*self.id_columns, *(k for r in self.relations for k in r.local_key)])


def _read_columns(emit: Sequence[str], keys: Sequence[str]) -> list[str]:
    out = list(emit)
    for k in keys:
        if k not in out:
            out.append(k)
    return out


def _fk_between(child: TableInfo, parent: TableInfo) -> list[tuple[list[str], list[str]]]:
    return [(list(fk.columns), list(fk.ref_columns)) for fk in child.foreign_keys if fk.ref_table == parent.name]


def _resolve_relation(source: Source, parent: TableInfo, cfg: RelationConfig, where: str) -> RelationPlan:
    table = source.table(cfg.table, f"{where}.table")
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
        local = local or list(parent.primary_key)
    if not local or not remote:
        raise ConfigError(f"{where}: table {table.name!r} has no primary key; set local_key and remote_key")
    if len(local) != len(remote):
        raise ConfigError(f"{where}: local_key {local} and remote_key {remote} differ in length")
    parent.require_columns(local, f"{where}.local_key")
    table.require_columns(remote, f"{where}.remote_key")
    emit = list(cfg.columns) if cfg.columns is not None else list(table.columns)
    table.require_columns(emit, f"{where}.columns")
    order_by = cfg.order_by or list(table.primary_key) or remote
    table.require_columns(order_by, f"{where}.order_by")
    children = [
        _resolve_relation(source, table, child, f"{where}.relations[{i}]") for i, child in enumerate(cfg.relations)
    ]
    _check_names(emit, children, where)
    return RelationPlan(cfg.name, cfg.type, table, emit, list(local), list(remote), list(order_by), children)


def _check_names(emit: Sequence[str], relations: Sequence[RelationPlan], where: str) -> None:
    for i, rel in enumerate(relations):
        if rel.name in emit:
            raise ConfigError(
                f"{where}.relations[{i}].name: {rel.name!r} is also a column; choose another name "
                f"or leave the column out with 'columns'"
            )


def check_unique_id(table: TableInfo, id_columns: Sequence[str], where: str) -> None:
    """Refuse ``id:`` columns the database does not keep unique and non-NULL.

    Rows sharing an id overwrite each other's document, and keyset paging (``key > after``)
    skips every row that shares a page's last key; a NULL key is never ``> after`` at all, so
    such rows are never read. Both losses would be silent, so the config is refused instead.
    The primary key's columns count as non-NULL (SQLite alone lets some hold NULL, a legacy quirk).
    """
    ids = set(id_columns)
    names = ", ".join(repr(c) for c in id_columns)
    nullable = [c for c in id_columns if table.columns[c].nullable and c not in table.primary_key]
    if nullable:
        raise ConfigError(
            f"{where}: column(s) {', '.join(repr(c) for c in nullable)} of table {table.name!r} may hold NULL; "
            "rows with a NULL id would never be read. Declare them NOT NULL or use the primary key "
            f"({', '.join(table.primary_key) or 'none'})"
        )
    keys = [table.primary_key, *table.unique_keys] if table.primary_key else list(table.unique_keys)
    if not any(key and set(key) <= ids for key in keys):
        known = "; ".join(f"({', '.join(k)})" for k in keys) or "none"
        raise ConfigError(
            f"{where}: column(s) {names} of table {table.name!r} are not unique (no primary key, unique "
            "constraint or unique index covers them); rows sharing an id would overwrite each other "
            f"and keyset paging would skip rows. Unique column sets of {table.name!r}: {known}"
        )


def resolve_index(source: Source, cfg: IndexConfig, where: str) -> IndexPlan:
    table = source.table(cfg.table, f"{where}.table")
    id_columns = list(cfg.id) if cfg.id else list(table.primary_key)
    if not id_columns:
        raise ConfigError(f"{where}.id: table {table.name!r} has no primary key; name the id column(s)")
    table.require_columns(id_columns, f"{where}.id")
    check_unique_id(table, id_columns, f"{where}.id")
    emit = list(cfg.columns) if cfg.columns is not None else list(table.columns)
    table.require_columns(emit, f"{where}.columns")
    relations = [_resolve_relation(source, table, r, f"{where}.relations[{i}]") for i, r in enumerate(cfg.relations)]
    _check_names(emit, relations, where)
    return IndexPlan(cfg, table, id_columns, emit, relations)
