"""PostgreSQL: server-side (named) cursors for pages, TABLESAMPLE for key boundaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import DOMAIN

from sparkindex.sources.base import KeyRange, Source, TableInfo
from sparkindex.sources.partitioning import distinct_in_order, ranges_from_boundaries, split_by_range_or_walk

#: Result types of computed fields, by PostgreSQL type name (the others are typed as text).
_RESULT_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    **dict.fromkeys(("int2", "int4", "int8", "oid"), sa.BigInteger()),
    "float4": sa.REAL(),
    "float8": sa.Float(precision=53),
    "numeric": sa.Numeric(),
    "bool": sa.Boolean(),
    **dict.fromkeys(("text", "varchar", "bpchar", "name"), sa.Text()),
    "date": sa.Date(),
    "timestamp": sa.DateTime(),
    "timestamptz": sa.DateTime(timezone=True),
    **dict.fromkeys(("json", "jsonb"), sa.JSON()),
    "uuid": sa.Uuid(),
}

#: Keys sampled per wanted partition: enough for boundaries within a few percent of even.
SAMPLES_PER_PARTITION = 200


class PostgresSource(Source):
    max_in_params = 5000

    def engine_options(self) -> dict[str, Any]:
        # The statement timeout travels in the startup packet (no extra round trip per
        # connection), appended to any options the URL already carries (search_path, ...).
        url_options = sa.make_url(self.url).query.get("options", "")
        if not isinstance(url_options, str):
            url_options = " ".join(url_options)
        timeout_ms = max(1, round(self.statement_timeout_s * 1000))
        # Stated so that a database's or role's settings cannot change them, because
        # documents/canonical_sql.py hands the server's bytes over as they are: floats as their
        # shortest round-trip digits (extra_float_digits=1, PostgreSQL's default), and UTF-8 (a
        # LATIN1 database would send LATIN1): a connection keyword, which wins over the URL's
        # query and PGCLIENTENCODING (an "-c client_encoding" option would not).
        options = f"{url_options} -c statement_timeout={timeout_ms} -c extra_float_digits=1".strip()
        return {"pool_pre_ping": True, "connect_args": {"options": options, "client_encoding": "UTF8"}}

    def column_reflect(self, inspector: Any, table: sa.Table, column_info: dict[str, Any]) -> None:
        col_type = column_info["type"]
        while isinstance(col_type, DOMAIN):  # its values are its base type's, on the wire too
            col_type = col_type.data_type
        column_info["type"] = col_type

    def described_type(self, conn: sa.Connection, column: Any) -> tuple[sa.types.TypeEngine[Any] | None, str]:
        """By the result column's type OID, named through the connection's type registry."""
        dbapi = conn.connection.dbapi_connection
        info = dbapi.adapters.types.get(column.type_code) if dbapi is not None else None
        if info is None:
            return None, f"type OID {column.type_code}"
        return _RESULT_TYPES.get(info.name), info.name

    def page_options(self) -> dict[str, Any]:
        return {"stream_results": True, "yield_per": 5000}

    def split_keys(self, info: TableInfo, key: Sequence[str], size: int, limit: int) -> list[KeyRange]:
        col = info.columns[key[0]]
        if len(key) == 1 and isinstance(col.type, sa.Integer):
            return split_by_range_or_walk(self, info, key, size, limit)
        total = self.count(info)
        parts = min(limit, max(1, math.ceil(total / size)))
        if parts <= 1:
            return [KeyRange(None, None)]
        # A Bernoulli sample of the keys, ordered by the server: its quantiles are the boundaries.
        # One pass over the table's pages, never one query per boundary. The boundaries keep the
        # server's ORDER BY order: under a collation (ICU, say) that order is not Python's, and
        # re-sorting them in Python would make ranges overlap and rows be read twice.
        pct = min(100.0, 100.0 * parts * SAMPLES_PER_PARTITION / total)
        sample = sa.tablesample(info.table, sa.func.bernoulli(pct), name="s", seed=sa.literal(7))
        cols = [sample.c[k] for k in key]
        with self.connect(f"a key sample of table {info.name!r}") as conn:
            keys = [tuple(r) for r in conn.execute(sa.select(*cols).order_by(*cols))]
        if len(keys) < parts:
            return split_by_range_or_walk(self, info, key, size, limit)
        bounds = [keys[math.floor(i * len(keys) / parts) - 1] for i in range(1, parts)]
        return ranges_from_boundaries(distinct_in_order(bounds))
