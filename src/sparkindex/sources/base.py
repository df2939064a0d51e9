"""The source interface, implemented once over SQLAlchemy Core with per-dialect hooks.

Dialects differ in how they connect, how they split keys into ranges and how many bind parameters
a statement may carry; everything else (keyset pages, IN-batched child fetches) is portable SQL.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import NoSuchTableError, OperationalError

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError, TransientError

if TYPE_CHECKING:
    from sparkindex.documents.builder import DocumentBuilder
    from sparkindex.documents.plan import IndexPlan

log = logging.getLogger(__name__)

Key = tuple[Any, ...]


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
    table: sa.Table = field(compare=False, repr=False)

    def require_columns(self, names: Sequence[str], where: str) -> None:
        for name in names:
            if name not in self.columns:
                known = ", ".join(self.columns)
                raise ConfigError(f"{where}: column {name!r} not found in table {self.name!r} (columns: {known})")


def coerce_key(info: TableInfo, key: Sequence[str], values: Key | None) -> Key | None:
    """Turn a key read back from JSON (cursor, range bound) into the column's Python type."""
    if values is None:
        return None
    out = []
    for name, value in zip(key, values, strict=True):
        col_type = info.columns[name].type
        if isinstance(value, str):
            if isinstance(col_type, sa.Uuid):
                value = uuid.UUID(value)
            elif isinstance(col_type, sa.DateTime):
                value = dt.datetime.fromisoformat(value)
            elif isinstance(col_type, sa.Date):
                value = dt.date.fromisoformat(value)
        elif isinstance(col_type, sa.Numeric) and not isinstance(col_type, sa.Float) and isinstance(value, float):
            value = decimal.Decimal(str(value))
        out.append(value)
    return tuple(out)


@dataclass(frozen=True)
class KeyRange:
    """Rows with ``after < key <= upto``; ``None`` leaves that end open."""

    after: Key | None
    upto: Key | None


class Source:
    """A relational database read through SQLAlchemy Core."""

    #: SQLite allows 32766 variables in modern builds; stay well below every dialect's limit.
    max_in_params = 900
    #: whether build: auto assembles documents in the database (set from measurement, see bench/).
    prefer_database_build = False

    def __init__(self, url: str, engine: Engine | None = None) -> None:
        self.url = url
        self.engine = engine or sa.create_engine(url, **self.engine_options())
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

    def database_builder(self, plan: IndexPlan) -> DocumentBuilder | None:
        """A builder that assembles whole documents in SQL, if this dialect has one."""
        return None

    def split_keys(self, info: TableInfo, key: Sequence[str], size: int, limit: int) -> list[KeyRange]:
        """Split the key space into ranges of about *size* rows, at most *limit* of them."""
        from sparkindex.sources.partitioning import split_by_range_or_walk

        return split_by_range_or_walk(self, info, key, size, limit)

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
        info = TableInfo(name, columns, tuple(str(c.name) for c in table.primary_key.columns), fks, table)
        self._tables[name] = info
        return info

    # -- reads -------------------------------------------------------------------------------------
    def count(self, info: TableInfo) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(info.table)).scalar_one())

    def key_extent(self, info: TableInfo, column: str) -> tuple[Any, Any]:
        col = info.table.c[column]
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(sa.func.min(col), sa.func.max(col))).one()
        return row[0], row[1]

    def walk_keys(self, info: TableInfo, key: Sequence[str], batch: int = 10_000) -> Iterator[Key]:
        """Every key in order, streamed; reads only the key columns (an index-only scan)."""
        cols = [info.table.c[k] for k in key]
        with self.engine.connect() as conn:
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
        with self.engine.connect().execution_options(**self.page_options()) as conn:
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
        with self.engine.connect() as conn:
            for i in range(0, len(unique), per):
                chunk = unique[i : i + per]
                cond = mcols[0].in_([v[0] for v in chunk]) if len(mcols) == 1 else sa.tuple_(*mcols).in_(chunk)
                out.extend(conn.execute(sa.select(*sel).where(cond).order_by(*order)).fetchall())
        return out

    def close(self) -> None:
        self.engine.dispose()
