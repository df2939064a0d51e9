"""An index as the source of a reindex: the "tables" are the indexes and aliases of a target.

A pipeline whose ``source.url`` names a search backend (``tantivy:///srv/idx``,
``opensearch://host:9200``, ...) rebuilds one of its indexes (``indexes[].table``) into a new
version with a new mapping, without touching the database the documents came from.

This is a :class:`Source` so that the reindex runs unchanged: planning counts and splits it,
partitions page through it, verify looks ids up in it. Its rows are the stored documents, its
one key column is ``_id`` and its order is the sort key every document stores (``_key``), so
ranges and cursors hold sort keys. Everything goes through the :class:`TargetReader` interface
(``mapping``, ``count``, ``key_splits``, ``read_documents``, ``scan_hashes``): it works for every
backend. SQL-only calls (``read_page``, index walks) are refused: the index-source builder
(``documents/from_index.py``) reads documents instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError, PermanentError
from sparkindex.index_source.columns import ID_COLUMN, source_fields
from sparkindex.sources.base import Column, Key, KeyRange, Source, TableInfo
from sparkindex.sources.partitioning import ranges_from_boundaries
from sparkindex.targets.base import KeyBounds, StoredDocument
from sparkindex.targets.reader import TargetReader
from sparkindex.targets.registry import open_target

#: What the documents package's ``make_builder`` keys the index-source builder by.
DIALECT = "sparkindex-index"

_SQL_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "text": sa.Text(),
    "keyword": sa.String(256),
    "long": sa.BigInteger(),
    "double": sa.Float(),
    "boolean": sa.Boolean(),
    "date": sa.DateTime(),
}


def _sql_type(spec: dict[str, Any]) -> sa.types.TypeEngine[Any]:
    kind = spec.get("type", "object" if "properties" in spec else "keyword")
    return _SQL_TYPES.get(str(kind), sa.JSON())


def page_bounds(rng: KeyRange, after: Key | None) -> tuple[KeyBounds | None, str | None]:
    """A partition's range (``after < key <= upto``, keys as 1-tuples) and cursor as a target
    read: (``[lo, hi)`` bounds, the key to read above). Sort keys are hex, so the first key above
    ``upto`` is ``upto + "0"``: no key lies between them."""
    start = after if after is not None else rng.after
    hi = None if rng.upto is None else str(rng.upto[0]) + "0"
    return (None if hi is None else (None, hi)), (None if start is None else str(start[0]))


class IndexSource(Source):
    """The indexes of one target, read as a source (see the module's docstring)."""

    def __init__(self, url: str, target: TargetReader) -> None:  # no SQL engine: nothing of Source.__init__ applies
        self.url = url
        self.statement_timeout_s = 0.0
        self.target = target
        self._tables: dict[str, TableInfo] = {}

    @classmethod
    def open(cls, url: str, base_dir: Path | None = None, options: dict[str, Any] | None = None) -> IndexSource:
        """The indexes at *url*, read through a target opened for them (closed with this source)."""
        return cls(url, open_target(url, base_dir or Path.cwd(), options or {}))

    @property
    def dialect_name(self) -> str:
        return DIALECT

    def __repr__(self) -> str:
        return f"IndexSource({redact_url(self.url)!r})"

    # -- what the reindex asks of a source ----------------------------------------------------------
    def mapping(self, name: str, where: str = "") -> dict[str, Any]:
        try:
            return self.target.mapping(name)
        except PermanentError as exc:
            prefix = f"{where}: " if where else ""
            raise ConfigError(f"{prefix}cannot read index {name!r} from {redact_url(self.url)}: {exc}") from None

    def table(self, name: str, where: str = "") -> TableInfo:
        """The index as a table: ``_id`` (its key) and its documents' top-level fields."""
        if name not in self._tables:
            mapping = self.mapping(name, where)
            props = mapping.get("properties", {})
            columns = {ID_COLUMN: Column(ID_COLUMN, sa.String(), False)}
            for field in source_fields(mapping):
                columns[field] = Column(field, _sql_type(props[field]), True)
            table = sa.Table(name, sa.MetaData(), *(sa.Column(c.name, c.type) for c in columns.values()))
            self._tables[name] = TableInfo(name, columns, (ID_COLUMN,), (), table)
        return self._tables[name]

    def table_names(self) -> list[str]:
        return sorted(self._tables)

    def count(self, info: TableInfo) -> int:
        return self.target.count(info.name)

    def split_keys(self, info: TableInfo, key: Sequence[str], size: int, limit: int) -> list[KeyRange]:
        """Ranges of about *size* documents (at most *limit*), cut at the target's key splits."""
        total = self.count(info)
        parts = min(limit, max(1, math.ceil(total / size)))
        splits = self.target.key_splits(info.name, parts) if parts > 1 else []
        return ranges_from_boundaries([(s,) for s in splits])

    def read_documents(
        self, info: TableInfo, rng: KeyRange, after: Key | None, limit: int, fields: Sequence[str] | None
    ) -> list[StoredDocument]:
        """One keyset page of the partition *rng* after the cursor *after*, in sort-key order."""
        bounds, above = page_bounds(rng, after)
        return self.target.read_documents(info.name, bounds, above, limit, fields)

    def fetch_where_in(
        self,
        info: TableInfo,
        match: Sequence[str],
        values: Sequence[Key],
        columns: Sequence[str],
        order_by: Sequence[str],
    ) -> list[tuple[Any, ...]]:
        """Which of these ids the index holds (verify asks which documents the source still has)."""
        if list(match) != [ID_COLUMN] or any(c != ID_COLUMN for c in columns):
            raise PermanentError(f"{self!r}: documents can only be looked up by {ID_COLUMN!r}")
        ids = list(dict.fromkeys(str(v[0]) for v in values))
        if not ids:
            return []
        found = dict.fromkeys(doc_id for doc_id, _ in self.target.scan_hashes(info.name, ids=ids))
        return [tuple(doc_id for _ in columns) for doc_id in sorted(found)]

    # -- SQL reads an index cannot serve ------------------------------------------------------------
    def _refuse(self, what: str) -> PermanentError:
        return PermanentError(f"{self!r}: an index source has no {what}; its documents are read with read_documents")

    def read_page(self, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        raise self._refuse("rows to page through")

    def walk_keys(self, *args: Any, **kwargs: Any) -> Iterator[Key]:
        raise self._refuse("key index to walk")

    def key_extent(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        raise self._refuse("key extent")

    def close(self) -> None:
        self.target.close()
