"""A level's shape: which of its table's rows it takes, and which fields its documents get from them.

One level is the index's root table or one relation's table. Its shape is a row filter (``where``),
renamed columns (``fields: {title: {from: name}}``), computed fields (SQL expressions) and the
columns left out (``exclude``, which only shortens the emitted list). Every read that builds
documents goes through the level's *shaped view*: the subquery
``SELECT <the table's columns>, <expr> AS <field>, ... FROM <table> WHERE (<filter>)`` whose columns
carry the documents' field names beside the table's own (keys keep theirs). Both builders, verify,
repair, the re-drive and change capture's rebuilds all read through it, so no path can honour a
filter or a rename that another misses. PostgreSQL, MariaDB and SQLite merge such a subquery into
the outer statement, so keyset and ``IN`` predicates still reach the table's indexes; an unshaped
level reads its table directly, exactly as before.

Reads that must see every row read the table itself: partitioning, change capture's fan-out (a
change to a row outside the filter still rebuilds its document, which then is deleted or
re-created by the rebuild) and the key walks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.errors import ConfigError
from sparkindex.sources.base import Column, Source, TableInfo
from sparkindex.sources.expressions import check_filter, expression_type, literal_sql


@dataclass(frozen=True)
class Shape:
    """The rows and fields one level takes from its table (the default takes all, as they are)."""

    where: str | None = None
    #: document field -> the column its value comes from
    renamed: dict[str, str] = field(default_factory=dict)
    #: document field -> its SQL expression over the row
    computed: dict[str, str] = field(default_factory=dict)
    #: document field -> the type the database gives the expression's result
    computed_types: dict[str, sa.types.TypeEngine[Any]] = field(default_factory=dict, compare=False)

    @property
    def plain(self) -> bool:
        """Nothing to filter, rename or compute: the table is read as it is."""
        return self.where is None and not self.renamed and not self.computed

    def describe(self) -> dict[str, Any]:
        """What decides the documents, for fingerprints and ``explain``."""
        return {"where": self.where, "renamed": self.renamed, "computed": self.computed}


PLAIN = Shape()


def shaped_view(table: TableInfo, shape: Shape) -> TableInfo:
    """*table* as the level's documents read it: its columns under their names, the renamed and
    computed fields under theirs, only the rows the filter keeps. A field named like a column
    hides that column (resolution refused it where the column is needed as a key)."""
    if shape.plain:
        return table
    fields = {**shape.renamed, **shape.computed}
    selected: list[Any] = [c for c in table.table.c if str(c.name) not in fields]
    columns = {name: col for name, col in table.columns.items() if name not in fields}
    for name, column in shape.renamed.items():
        selected.append(table.table.c[column].label(name))
        columns[name] = Column(name, table.columns[column].type, table.columns[column].nullable)
    for name, expression in shape.computed.items():
        col_type = shape.computed_types.get(name, sa.Text())
        selected.append(literal_sql(expression, col_type).label(name))
        columns[name] = Column(name, col_type, True)
    stmt = sa.select(*selected).select_from(table.table)
    if shape.where is not None:
        stmt = stmt.where(literal_sql(shape.where))
    view = stmt.subquery(table.name)
    return TableInfo(
        table.name,
        columns,
        table.primary_key,
        table.foreign_keys,
        view,
        table.unique_keys,
    )


def check_keys_visible(shape: Shape, needed: list[str], where: str, table: str) -> None:
    """Refuse a renamed or computed field named like a column the level needs under its own
    name (a key, an order, a version): the field would hide it in the shaped view."""
    for name in [*shape.renamed, *shape.computed]:
        if name in needed and shape.renamed.get(name) != name:
            raise ConfigError(
                f"{where}: the field {name!r} is named like column {name!r} of table {table!r}, which this "
                "index needs as a key, an order or a version; name the field otherwise"
            )


def resolve_shape(
    source: Source,
    table: TableInfo,
    columns: list[str] | None,
    exclude: list[str],
    renamed: dict[str, str],
    computed: dict[str, str],
    where: str | None,
    key: str,
    renamed_paths: Sequence[str] = (),
) -> tuple[list[str], Shape]:
    """The fields one level emits, in order, and its shape, checked against the live database.

    *key* is the level's config key path (``p.yaml: indexes[0]``, ``...relations[1]``); *renamed*
    comes from the index's ``fields`` entries with a ``from`` for this level, whose dotted paths
    are *renamed_paths* (for messages: a bad ``from`` is named under the index's ``fields``). The emitted fields:
    ``columns`` (default: all), each renamed column under its new name in its place, the computed
    fields after them, minus ``exclude``. A renamed or computed field named like a column takes
    that column's place.
    """
    emit = list(columns) if columns is not None else list(table.columns)
    table.require_columns(emit, f"{key}.columns")
    index_key = key.split(".relations[")[0]  # where the `fields` entries are: on the index
    path = {name: dotted for dotted in renamed_paths for name in [dotted.rpartition(".")[2]]}
    for name, column in renamed.items():
        table.require_columns([column], f"{index_key}.fields.{path.get(name, name)}.from")
        if column in emit:
            emit[emit.index(column)] = name
        elif name not in emit:
            emit.append(name)
    emit = list(dict.fromkeys(emit))
    emit += [name for name in computed if name not in emit]
    known = set(table.columns) | set(renamed) | set(computed)
    for i, name in enumerate(exclude):
        if name not in known:
            raise ConfigError(
                f"{key}.exclude[{i}]: {name!r} is no column of table {table.name!r} nor a renamed or computed "
                f"field (columns: {', '.join(table.columns)})"
            )
    emit = [name for name in emit if name not in set(exclude)]
    if where is not None:
        check_filter(source, table, where, f"{key}.where")
    types = {name: expression_type(source, table, sql, f"{key}.computed.{name}") for name, sql in computed.items()}
    return emit, Shape(where, dict(renamed), dict(computed), types)


def level_renames(renamed: Mapping[str, str], path: str) -> dict[str, str]:
    """The renames (``fields`` entries with ``from``) of the level at *path* ("" for the root,
    ``reviews.author`` for a nested relation): new field name -> column."""
    out: dict[str, str] = {}
    for dotted, column in renamed.items():
        prefix, _, name = dotted.rpartition(".")
        if prefix == path:
            out[name] = column
    return out


def index_renames(cfg: IndexConfig, where: str) -> dict[str, str]:
    """The index's renames by dotted field path, each naming a level that exists."""
    renamed = {path: f.from_ for path, f in cfg.fields.items() if f.from_ is not None}
    levels = {""}

    def walk(relations: Sequence[RelationConfig], prefix: str) -> None:
        for rel in relations:
            levels.add(f"{prefix}.{rel.name}" if prefix else rel.name)
            walk(rel.relations, f"{prefix}.{rel.name}" if prefix else rel.name)

    walk(cfg.relations, "")
    for path in renamed:
        prefix = path.rpartition(".")[0]
        if prefix not in levels:
            raise ConfigError(
                f"{where}.fields.{path}.from: {prefix!r} is no relation of this index; a renamed field's path is "
                "the relation names down to it, then its new name"
            )
    return renamed


__all__ = [
    "PLAIN",
    "Shape",
    "check_keys_visible",
    "index_renames",
    "level_renames",
    "resolve_shape",
    "shaped_view",
]
