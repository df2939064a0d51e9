"""The source interface, implemented once over SQLAlchemy Core with per-dialect hooks.

Dialects differ in how they connect, how they split keys into ranges and how many bind parameters
a statement may carry; everything else (keyset pages, IN-batched child fetches) is portable SQL.
This package never imports the documents package: documents are built on top of sources,
and the choice of an in-database builder lives there (keyed by the engine's dialect name).
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import NoSuchTableError, OperationalError

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError, PermanentError, TransientError

log = logging.getLogger(__name__)

Key = tuple[Any, ...]

#: Default per-statement limit on source queries: long enough for any sane page or index walk,
#: short enough that one hung query (a lock wait, a lost network peer) fails the read instead of
#: hanging the job forever.
DEFAULT_STATEMENT_TIMEOUT_S = 600.0


def literal_sql(fragment: str, type_: sa.types.TypeEngine[Any] | None = None) -> sa.ColumnElement[Any]:
    """A user's SQL *fragment* (a filter, a computed field) as a parenthesised expression, its own
    precedence kept; literal, never bound text: a ``:`` in a string literal is not a parameter,
    and SQLAlchemy doubles ``%`` for the drivers that need it."""
    return sa.literal_column(f"({fragment})", type_)


@dataclass(frozen=True)
class Column:
    name: str
    type: sa.types.TypeEngine[Any]
    nullable: bool


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: dict[str, Column]
    primary_key: tuple[str, ...]
    foreign_keys: tuple[ForeignKey, ...]
    #: the table itself, or the shaped view one level of documents reads it through (a filtered subquery)
    table: sa.FromClause = field(compare=False, repr=False)
    #: Column sets the database keeps unique: unique constraints and unique indexes (not partial
    #: ones, not expressions); the primary key is in ``primary_key``.
    unique_keys: tuple[tuple[str, ...], ...] = ()

    def require_columns(self, names: Sequence[str], where: str) -> None:
        for name in names:
            if name not in self.columns:
                known = ", ".join(self.columns)
                raise ConfigError(f"{where}: column {name!r} not found in table {self.name!r} (columns: {known})")


def _coerce(col_type: sa.types.TypeEngine[Any], value: Any) -> Any:
    """One key part back in the column's Python type, so the database compares it as the original."""
    if value is None:
        return None
    if isinstance(col_type, sa.Uuid):
        return uuid.UUID(value) if isinstance(value, str) else value
    if isinstance(col_type, sa.DateTime):
        return dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if isinstance(col_type, sa.Date):
        return dt.date.fromisoformat(value) if isinstance(value, str) else value
    if isinstance(col_type, sa.Time):
        return dt.time.fromisoformat(value) if isinstance(value, str) else value
    if isinstance(col_type, sa.Interval):
        return dt.timedelta(seconds=value) if isinstance(value, int | float) else value
    if isinstance(col_type, sa.Integer):
        return int(value) if isinstance(value, decimal.Decimal | float) and not isinstance(value, bool) else value
    if isinstance(col_type, sa.Float):
        return float(value) if isinstance(value, decimal.Decimal | int) and not isinstance(value, bool) else value
    if isinstance(col_type, sa.Numeric):
        # str(): a float such as 0.1 becomes Decimal('0.1'), not its binary expansion.
        return decimal.Decimal(str(value)) if isinstance(value, float | int) and not isinstance(value, bool) else value
    if isinstance(col_type, sa.LargeBinary | sa.BINARY | sa.VARBINARY):
        return bytes(value) if isinstance(value, bytearray | memoryview) else value
    return value


def coerce_key(info: TableInfo, key: Sequence[str], values: Key | None) -> Key | None:
    """Turn a key read back from storage (``sparkindex.keys.load_key``, plain JSON) into the columns' types.

    A cursor that comes back as the wrong type compares differently (a Decimal bound as float
    rounds, a date bound as text compares as text on some dialects), so the next page would
    start at the wrong row: every key type is restored here.
    """
    if values is None:
        return None
    return tuple(_coerce(info.columns[name].type, value) for name, value in zip(key, values, strict=True))


@dataclass(frozen=True)
class KeyRange:
    """Rows with ``after < key <= upto``; ``None`` leaves that end open."""

    after: Key | None
    upto: Key | None


class Source:
    """A relational database read through SQLAlchemy Core; a context manager that closes it
    (``with open_source(pipeline) as source:``, :mod:`sparkindex.resources`)."""

    #: SQLite allows 32766 variables in modern builds; stay well below every dialect's limit.
    max_in_params = 900

    def __init__(
        self, url: str, engine: Engine | None = None, statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S
    ) -> None:
        if statement_timeout_s <= 0:
            raise ConfigError(f"source statement timeout must be positive, got {statement_timeout_s}")
        self.url = url
        self.statement_timeout_s = statement_timeout_s
        if engine is None:
            engine = sa.create_engine(url, **self.engine_options())
            sa.event.listen(engine, "connect", self._on_connect)
        self.engine = engine
        self._meta = sa.MetaData()
        sa.event.listen(self._meta, "column_reflect", self.column_reflect)
        self._tables: dict[str, TableInfo] = {}

    # -- hooks -------------------------------------------------------------------------------------
    def engine_options(self) -> dict[str, Any]:
        """Extra ``create_engine`` arguments for this dialect."""
        return {}

    def column_reflect(self, inspector: Any, table: sa.Table, column_info: dict[str, Any]) -> None:
        """Adjust a reflected column type where the dialect's reflection loses meaning; optional."""

    def page_options(self) -> dict[str, Any]:
        """Execution options for keyset pages (server-side cursors where the dialect has them)."""
        return {}

    def session_setup(self, dbapi_conn: Any) -> None:
        """Session settings for every new connection (the statement timeout); optional."""

    def result_type(
        self, conn: sa.Connection, info: TableInfo, fragment: str
    ) -> tuple[sa.types.TypeEngine[Any] | None, str]:
        """The type of *expression*'s result over *info*'s rows, as the server reports it, and the
        server's name for it (the type None: no field type fits). Prepares the expression without
        reading a row, so a bad one raises the driver's error
        (:mod:`sparkindex.sources.expressions` reports it)."""
        result = conn.execute(sa.select(literal_sql(fragment)).select_from(info.table).limit(0))
        try:
            description = result.cursor.description if result.cursor is not None else None
        finally:
            result.close()
        return self.described_type(conn, description[0]) if description else (None, "unknown")

    def described_type(self, conn: sa.Connection, column: Any) -> tuple[sa.types.TypeEngine[Any] | None, str]:
        """The type a DB-API cursor description's *column* names, and its name; optional."""
        return None, "unknown"

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        self.session_setup(dbapi_conn)

    @property
    def dialect_name(self) -> str:
        """SQLAlchemy's dialect name (``sqlite``, ``postgresql``, ``mysql``): what builders are keyed by."""
        return str(self.engine.dialect.name)

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Map a failed read (statement timeout, lost connection) to :class:`TransientError`.

        Such a read may succeed when retried (a lock released, a server back); the message names
        what was read and the timeout, so a query that always times out is recognisable.
        """
        try:
            yield
        except OperationalError as exc:
            detail = redact_url(str(exc.orig)).strip()
            if _mysql_errno(exc) in PERMANENT_MYSQL_ERRORS:
                raise PermanentError(f"source {redact_url(self.url)}: reading {what} failed: {detail}") from exc
            raise TransientError(
                f"source {redact_url(self.url)}: reading {what} failed "
                f"(statement timeout {self.statement_timeout_s:g} s): {detail}"
            ) from exc

    def split_keys(self, info: TableInfo, key: Sequence[str], size: int, limit: int) -> list[KeyRange]:
        """Split the key space into ranges of about *size* rows, at most *limit* of them."""
        from sparkindex.sources.partitioning import split_by_range_or_walk

        return split_by_range_or_walk(self, info, key, size, limit)

    @contextmanager
    def connect(self, what: str, **options: Any) -> Iterator[sa.Connection]:
        """A connection for reading *what*, its failures mapped by :meth:`reading`."""
        with self.reading(what), self.engine.connect().execution_options(**options) as conn:
            yield conn

    # -- introspection -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_url(self.url)!r})"

    def table_names(self) -> list[str]:
        return sorted(sa.inspect(self.engine).get_table_names())

    def table(self, name: str, where: str = "") -> TableInfo:
        if name in self._tables:
            return self._tables[name]
        try:
            table = sa.Table(name, self._meta, autoload_with=self.engine)
        except NoSuchTableError:
            known = ", ".join(self.table_names()) or "none"
            prefix = f"{where}: " if where else ""
            raise ConfigError(f"{prefix}table {name!r} not found in the source (tables: {known})") from None
        except OperationalError as exc:
            raise TransientError(
                f"source {redact_url(self.url)}: cannot read table {name!r}: {redact_url(str(exc.orig)).strip()}"
            ) from None
        columns = {str(c.name): Column(str(c.name), c.type, bool(c.nullable)) for c in table.columns}
        fks = tuple(
            ForeignKey(
                tuple(str(el.parent.name) for el in fk.elements),
                str(fk.referred_table.name),
                tuple(str(el.column.name) for el in fk.elements),
            )
            for fk in table.foreign_key_constraints
        )
        pk = tuple(str(c.name) for c in table.primary_key.columns)
        info = TableInfo(name, columns, pk, fks, table, self._unique_keys(name))
        self._tables[name] = info
        return info

    def _unique_keys(self, name: str) -> tuple[tuple[str, ...], ...]:
        """Unique constraints and full unique indexes on plain columns (partial ones prove nothing)."""
        inspector = sa.inspect(self.engine)
        found: list[tuple[str, ...]] = []
        for uc in inspector.get_unique_constraints(name):
            found.append(tuple(str(c) for c in uc["column_names"]))
        for ix in inspector.get_indexes(name):
            options = ix.get("dialect_options", {})
            partial = any(k.endswith("_where") and v is not None for k, v in options.items())
            names = ix["column_names"]
            if ix["unique"] and not partial and names and all(c is not None for c in names):
                found.append(tuple(str(c) for c in names))
        return tuple(dict.fromkeys(found))

    # -- reads -------------------------------------------------------------------------------------
    def count(self, info: TableInfo) -> int:
        with self.connect(f"the row count of table {info.name!r}") as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(info.table)).scalar_one())

    def key_extent(self, info: TableInfo, column: str) -> tuple[Any, Any]:
        col = info.table.c[column]
        with self.connect(f"the key extent of table {info.name!r}") as conn:
            row = conn.execute(sa.select(sa.func.min(col), sa.func.max(col))).one()
        return row[0], row[1]

    def walk_keys(self, info: TableInfo, key: Sequence[str], batch: int = 10_000) -> Iterator[Key]:
        """Every key in order, streamed; reads only the key columns (an index-only scan)."""
        cols = [info.table.c[k] for k in key]
        with self.connect(f"the keys of table {info.name!r}") as conn:
            result = conn.execution_options(stream_results=True, yield_per=batch).execute(
                sa.select(*cols).order_by(*cols)
            )
            for row in result:
                yield tuple(row)

    @staticmethod
    def _key_cond(cols: Sequence[sa.ColumnElement[Any]], op: str, values: Key) -> sa.ColumnElement[bool]:
        if len(cols) == 1:
            left: Any = cols[0]
            right: Any = values[0]
        else:
            left = sa.tuple_(*cols)
            right = sa.tuple_(*[sa.literal(v) for v in values])
        return left > right if op == ">" else left <= right  # type: ignore[no-any-return]

    def read_page(
        self,
        info: TableInfo,
        key: Sequence[str],
        columns: Sequence[str],
        rng: KeyRange,
        after: Key | None,
        limit: int,
    ) -> list[tuple[Any, ...]]:
        """One keyset page: rows with key > max(range start, *after*) and key <= range end."""
        kcols = [info.table.c[k] for k in key]
        stmt = sa.select(*[info.table.c[c] for c in columns])
        start = coerce_key(info, key, after if after is not None else rng.after)
        upto = coerce_key(info, key, rng.upto)
        if start is not None:
            stmt = stmt.where(self._key_cond(kcols, ">", start))
        if upto is not None:
            stmt = stmt.where(self._key_cond(kcols, "<=", upto))
        stmt = stmt.order_by(*kcols).limit(limit)
        with self.connect(f"a page of table {info.name!r}", **self.page_options()) as conn:
            return list(conn.execute(stmt).fetchall())

    def fetch_where_in(
        self,
        info: TableInfo,
        match: Sequence[str],
        values: Sequence[Key],
        columns: Sequence[str],
        order_by: Sequence[str],
    ) -> list[tuple[Any, ...]]:
        """Rows whose *match* columns equal one of *values*, in batches of bind parameters."""
        if not values:
            return []
        mcols = [info.table.c[m] for m in match]
        sel = [info.table.c[c] for c in columns]
        order = [info.table.c[c] for c in order_by]
        out: list[tuple[Any, ...]] = []
        per = max(1, self.max_in_params // len(match))
        unique = list(dict.fromkeys(values))
        with self.connect(f"rows of table {info.name!r} by {', '.join(match)}") as conn:
            for i in range(0, len(unique), per):
                chunk = unique[i : i + per]
                # in_() over the values, not a cached statement with an expanding parameter: it
                # binds them with the type SQLAlchemy derives from the column and the values
                # (a Decimal parent key against an INTEGER column binds as a number, a date
                # against a DATETIME as a date), which an untyped parameter would not
                cond = mcols[0].in_([v[0] for v in chunk]) if len(mcols) == 1 else sa.tuple_(*mcols).in_(chunk)
                out.extend(conn.execute(sa.select(*sel).where(cond).order_by(*order)).fetchall())
        return out

    def close(self) -> None:
        """Close the engine's pooled connections; closing again does nothing more."""
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


#: MySQL/MariaDB errors its driver reports as OperationalError that repeat on every retry: a
#: column or table gone, a privilege missing (other dialects report these as ProgrammingError)
PERMANENT_MYSQL_ERRORS = frozenset({1044, 1045, 1054, 1142, 1143, 1146})


def _mysql_errno(exc: OperationalError) -> int | None:
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None
