"""What a builder hands back: built documents and keyset pages of them.

Kept apart from the builders so that every module that only passes documents along (the
worker, verify, change capture) reads their shape here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkindex.errors import DocumentError
from sparkindex.targets.base import BulkItem

Row = tuple[Any, ...]
Key = tuple[Any, ...]


@dataclass(frozen=True)
class BuiltDocument:
    id: str
    source: bytes  # canonical JSON
    hash: str
    #: the same document as the dict it was encoded from, for a target that needs its own
    #: encoding (Tantivy), so that it need not decode ``source`` again; None when the source wrote
    #: the canonical JSON itself (see canonical_sql), which such a target then decodes
    fields: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: :func:`sparkindex.keys.sort_key` of the root row's key
    sort_key: str | None = None
    #: external version (:mod:`sparkindex.documents.versions`), when the index names a version column
    version: int | None = None
    #: join children: their parent's document id (the shard they must live on)
    routing: str | None = None
    #: the document's range check (:mod:`sparkindex.checksums`), stored beside its content hash
    check: int | None = None

    def bulk_item(self) -> BulkItem:
        """This document as the write that indexes it."""
        return BulkItem(
            self.id,
            self.source,
            self.hash,
            version=self.version,
            routing=self.routing,
            fields=self.fields,
            sort_key=self.sort_key,
            check=self.check,
        )


@dataclass(frozen=True)
class Page:
    """One keyset page: its documents, its per-document failures, and where the next page starts.

    ``len(docs) + len(failures) == rows + children``: every row read is accounted for, the rows of
    join relations (documents of their own) included. ``rows`` counts root rows only: a page of
    fewer than the limit is the last.
    """

    docs: list[BuiltDocument]
    failures: list[DocumentError]
    rows: int
    last_key: tuple[Any, ...] | None
    children: int = 0
