"""The schema as a graph of facts: tables, their usable keys, their foreign keys and sizes.

Reflection goes through :class:`~sparkindex.sources.base.Source` (SQLAlchemy inspection plus the
dialects' own fixes, such as MariaDB's BOOLEAN), so ``init`` sees each table exactly as
``reindex`` will. Everything after reflection works on these plain facts, which tests can also
write by hand: inferring relations needs no database.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.scaffold.connect import first_line
from sparkindex.sources.base import Source, TableInfo

#: what a column is to a search document: indexed as it is, long free text (kept, but worth a
#: comment), binary (left out), values the document encoder cannot hold (MySQL SET: Python sets),
#: or a type whose documents nobody vouches for (left out)
Category = Literal["plain", "large_text", "binary", "set", "unsupported"]

#: a declared length from which text counts as large (TEXT, CLOB and unbounded VARCHAR are too)
LARGE_TEXT_LENGTH = 4000
#: from this many rows (the server's own estimate) a table is not counted exactly: COUNT(*) on
#: a table of hundreds of millions of rows would hold ``init`` for minutes
EXACT_COUNT_LIMIT = 1_000_000


@dataclass(frozen=True)
class ColumnFacts:
    name: str
    type_name: str
    category: Category
    nullable: bool
    #: integer or date/time: could hold a monotone "updated at" for polling change capture
    version_like: bool


@dataclass(frozen=True)
class Reference:
    """A foreign key: ``table.columns`` reference ``ref_table.ref_columns``."""

    table: str
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]
    #: some column may hold NULL: the row need not have a referenced row
    nullable: bool

    def describe(self) -> str:
        """``orders.o_custkey -> customer`` (the referenced columns are the key one expects)."""
        return f"{self.table}.{', '.join(self.columns)} -> {self.ref_table}"


@dataclass(frozen=True)
class TableFacts:
    name: str
    columns: tuple[ColumnFacts, ...]
    primary_key: tuple[str, ...]
    unique_keys: tuple[tuple[str, ...], ...]
    references: tuple[Reference, ...]
    rows: int
    #: the row count is the server's estimate (a large table), not an exact count
    rows_estimated: bool = False

    def column(self, name: str) -> ColumnFacts:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def key(self) -> tuple[str, ...] | None:
        """The columns that identify a row: the primary key, else the narrowest unique key
        whose columns are all NOT NULL (a NULL is never equal to anything, so a nullable unique
        key lets rows share it), else None."""
        if self.primary_key:
            return self.primary_key
        position = {c.name: i for i, c in enumerate(self.columns)}
        usable = [k for k in self.unique_keys if k and all(not self.column(c).nullable for c in k)]
        if not usable:
            return None
        return min(usable, key=lambda k: (len(k), [position[c] for c in k]))

    @property
    def key_source(self) -> str | None:
        if self.primary_key:
            return "primary key"
        return "unique key" if self.key is not None else None

    @property
    def has_link_shape(self) -> bool:
        """Shaped as the link table of a many-to-many relation: two NOT NULL foreign keys to other
        tables, whose columns are its key, or a unique key beside a one-column surrogate key
        (Django's ``id`` with its unique pair).
        Other columns are the link's own data (when a tag was added), kept in the nested element."""
        refs = [r for r in self.references if r.ref_table != self.name]
        if len(refs) != 2 or any(r.nullable for r in refs) or self.key is None:
            return False
        linked = {c for r in refs for c in r.columns}
        if set(self.key) == linked:
            return True
        # a surrogate key is a link's only when a unique key says each pair is linked once: a
        # forum post (its own id, its thread, its author) is an entity, not a link
        surrogate = len(self.key) == 1 and self.key[0] not in linked
        return surrogate and any(set(u) == linked for u in self.unique_keys)


@dataclass(frozen=True)
class SchemaGraph:
    dialect: str
    tables: dict[str, TableFacts]

    def table(self, name: str) -> TableFacts:
        return self.tables[name]

    def is_link(self, name: str) -> bool:
        """A link table: link-shaped, and no table references it. A table others reference
        (TPC-H's partsupp, which lineitem does) is an entity of its own, whatever its shape."""
        return self.tables[name].has_link_shape and not any(
            r.ref_table == name for t in self.tables.values() if t.name != name for r in t.references
        )

    def referencing(self, name: str) -> list[Reference]:
        """Foreign keys of every table (itself included) that reference *name*, in name order."""
        found = [r for t in self.tables.values() for r in t.references if r.ref_table == name]
        return sorted(found, key=lambda r: (r.table, r.columns))

    def names(self) -> list[str]:
        return sorted(self.tables)


def reflect_schema(source: Source) -> SchemaGraph:
    """Every table of the source's default schema, as facts; errors name the source (redacted)."""
    where = redact_url(source.url)
    try:
        names = source.table_names()
    except OperationalError as exc:
        raise ConfigError(f"--source {where}: cannot connect: {first_line(exc.orig)}") from None
    except SQLAlchemyError as exc:
        raise ConfigError(f"--source {where}: cannot read the schema: {first_line(exc)}") from None
    if not names:
        raise ConfigError(f"--source {where}: the database has no tables (nothing to index)")
    infos: dict[str, TableInfo] = {}
    with warnings.catch_warnings():
        # "Did not recognize type ...": such columns reflect as NullType and are left out below
        warnings.simplefilter("ignore", sa.exc.SAWarning)
        for name in names:
            infos[name] = source.table(name)
    dialect = source.engine.dialect
    tables = {name: _facts(source, info, set(names), dialect) for name, info in sorted(infos.items())}
    return SchemaGraph(source.dialect_name, tables)


def _facts(source: Source, info: TableInfo, known: set[str], dialect: sa.Dialect) -> TableFacts:
    columns = tuple(
        ColumnFacts(c.name, _type_name(c.type, dialect), categorize(c.type), c.nullable, _version_like(c.type))
        for c in info.columns.values()
    )
    nullable = {c.name: c.nullable and c.name not in info.primary_key for c in columns}
    # dict.fromkeys: a schema may declare the same foreign key twice (two constraint names)
    refs = tuple(
        dict.fromkeys(
            Reference(info.name, fk.columns, fk.ref_table, fk.ref_columns, any(nullable[c] for c in fk.columns))
            for fk in info.foreign_keys
            if fk.ref_table in known and fk.columns
        )
    )
    rows, estimated = count_rows(source, info)
    return TableFacts(info.name, columns, info.primary_key, info.unique_keys, refs, rows, estimated)


def categorize(col_type: sa.types.TypeEngine[Any]) -> Category:
    if isinstance(col_type, sa.types.NullType):
        return "unsupported"
    if _python_type(col_type) is bytes:
        return "binary"
    if isinstance(col_type, mysql.SET):  # a String by type, but its values are Python sets
        return "set"
    if isinstance(col_type, sa.String):
        length = col_type.length
        return "large_text" if length is None or length >= LARGE_TEXT_LENGTH else "plain"
    plain = (sa.Integer, sa.Numeric, sa.Float, sa.Boolean, sa.Date, sa.DateTime, sa.Time, sa.Uuid, sa.JSON)
    return "plain" if isinstance(col_type, plain) else "unsupported"


def _python_type(col_type: sa.types.TypeEngine[Any]) -> type | None:
    try:
        return col_type.python_type
    except NotImplementedError:
        return None


def _version_like(col_type: sa.types.TypeEngine[Any]) -> bool:
    """The types :func:`sparkindex.documents.key_rules.check_version_column` accepts."""
    if isinstance(col_type, sa.Boolean):
        return False
    if isinstance(col_type, sa.Integer | sa.DateTime | sa.Date):
        return True
    return isinstance(col_type, sa.Numeric) and not isinstance(col_type, sa.Float) and col_type.scale == 0


def _type_name(col_type: sa.types.TypeEngine[Any], dialect: sa.Dialect) -> str:
    try:
        return str(col_type.compile(dialect=dialect))
    except Exception:  # noqa: BLE001 - a type its own dialect cannot render: its class says enough
        return type(col_type).__name__


def count_rows(source: Source, info: TableInfo) -> tuple[int, bool]:
    """(rows, estimated): exact below :data:`EXACT_COUNT_LIMIT`, the server's estimate above it."""
    estimate = _estimate(source, info.name)
    if estimate is not None and estimate >= EXACT_COUNT_LIMIT:
        return estimate, True
    # never analysed (reltuples -1 or 0) or a stale InnoDB estimate: count, but never past the
    # limit, so a freshly restored large table costs a bounded read instead of a full scan
    capped = sa.select(sa.func.count()).select_from(
        sa.select(sa.literal(1)).select_from(info.table).limit(EXACT_COUNT_LIMIT).subquery()
    )
    with source.connect(f"the row count of table {info.name!r}") as conn:
        rows = int(conn.execute(capped).scalar() or 0)
    return rows, rows >= EXACT_COUNT_LIMIT


def _estimate(source: Source, name: str) -> int | None:
    """The planner's row estimate where the server keeps one (None: never analysed, or SQLite)."""
    if source.dialect_name == "postgresql":
        quoted = '"' + name.replace('"', '""') + '"'
        statement = sa.text("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(:name)")
        params = {"name": quoted}
    elif source.dialect_name == "mysql":
        statement = sa.text(
            "SELECT table_rows FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = :name"
        )
        params = {"name": name}
    else:
        return None
    with source.connect(f"the row estimate of table {name!r}") as conn:
        value = conn.execute(statement, params).scalar()
    return int(value) if value is not None and int(value) >= 0 else None
