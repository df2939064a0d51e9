"""The reading capability of a target: hash scans, reading documents back, key splits, search.

Verify scans ids and content hashes; ``spark.read``, index-to-index rebuilds and join removals read
documents back in sort-key order, cut into ranges by :meth:`TargetReader.key_splits`; the CLI
searches. Scans and search are required; reading back is optional, and a backend without it
refuses (:class:`PermanentError`), which verify and the readers handle.

Reading back *by id* (:meth:`TargetReader.documents_by_id`) serves the removal of root documents
whose rows are gone: a routed document (``indexes[].routing``) must be deleted with the routing it
was written with, which only the index still knows, and a soft delete rewrites the stored body as
a tombstone (:mod:`sparkindex.documents.tombstones`). :meth:`TargetReader.count_hash_prefix`
lets verify count those tombstones without scanning the index, and
:meth:`TargetReader.range_checksums` lets it compare a key range by one figure per side.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, final

from sparkindex.checksums import KeyCheck, RangeChecksum
from sparkindex.errors import PermanentError, SparkIndexError
from sparkindex.targets.base import KeyBounds, SearchHit, StoredDocument, TargetHandle


class TargetReader(TargetHandle):
    """A backend as the code that only reads its indexes sees it."""

    # -- required -------------------------------------------------------------------------------------
    @abstractmethod
    def scan_hashes(
        self, name: str, ids: Sequence[str] | None = None, key_range: KeyBounds | None = None
    ) -> Iterator[tuple[str, str]]:
        """(document id, content hash) of every document, of those with the given *ids*, or of
        those whose sort key lies in *key_range*.

        A document stored twice under one id is yielded twice: that is how verify sees duplicates.
        """

    @abstractmethod
    def search(self, name: str, query: str, limit: int = 10) -> list[SearchHit]: ...

    # -- optional: reading back (refused by default) --------------------------------------------------
    def read_documents(
        self,
        name: str,
        key_range: KeyBounds | None = None,
        after: str | None = None,
        size: int = 1000,
        fields: Sequence[str] | None = None,
        query: str | None = None,
    ) -> list[StoredDocument]:
        """Up to *size* documents of *key_range* whose sort key is above *after*, in sort-key
        order: a keyset page, for reading an index back and for index-to-index rebuilds.
        *fields* limits the source to those top-level fields. *query*, in the backend's own
        query-string syntax (Lucene-like: ``name:lamp AND stock:[1 TO 10]``), keeps only the
        documents it matches; a query the backend cannot parse raises :class:`UsageError`."""
        raise PermanentError(f"{type(self).__name__} cannot read documents back")

    def documents_by_id(
        self, name: str, ids: Sequence[str], fields: Sequence[str] | None = None
    ) -> list[StoredDocument]:
        """Every copy the index holds of the documents with these *ids*, in no particular order,
        each with the routing it was written with (None: unrouted, or a backend without routing).
        Asked across every shard, since the routing is what the caller does not know. *fields*
        limits the source to those top-level fields (``[]``: none, for the routing and hash)."""
        raise PermanentError(f"{type(self).__name__} cannot read documents back by id")

    def count_hash_prefix(self, name: str, prefix: str) -> int:
        """How many documents of *name* store a content hash beginning with *prefix* (verify
        counts the tombstones of soft deletes so, without reading the index)."""
        raise PermanentError(f"{type(self).__name__} cannot count documents by their hash")

    def stores_checks(self, name: str) -> bool:
        """Whether index (or alias) *name* stores each document's range check
        (:mod:`sparkindex.checksums`): indexes created by a sparkindex that writes them do; older
        ones do not, and verify compares them document by document."""
        return False

    def range_checksums(self, name: str, ranges: Sequence[KeyBounds]) -> list[RangeChecksum]:
        """For each sort-key range ``[lo, hi)``, the count and the sums of the checks of the
        documents of *name* that store one, by the engine's own aggregation (no document is
        read). Documents without a check (tombstones, documents written before checks were
        stored) are in no range's figure; ``unchecked`` says how many the range holds."""
        raise PermanentError(f"{type(self).__name__} cannot sum the checks of a key range")

    #: whether :meth:`key_checks` is implemented (a backend that has it says so)
    lists_key_checks: bool = False

    def key_checks(self, name: str, key_range: KeyBounds) -> Iterator[KeyCheck]:
        """Every sort key of *name* in ``[lo, hi)``, ascending, with how many documents hold it,
        how many of those store a check, and the sums of their checks' halves: what verify
        compares a differing range by, key by key, without reading a document (the engine's own
        aggregation over the sort key, paged)."""
        raise PermanentError(f"{type(self).__name__} cannot list the checks of a key range")

    def mapping(self, name: str) -> dict[str, Any]:
        """The mapping index or alias *name* was created with, as
        :meth:`~sparkindex.targets.writer.TargetWriter.create_version` took it
        (``{"properties": ...}``, without the backend's own fields such as ``_key``/``_hash``):
        the schema of an index read back into Spark and the base of an index-to-index rebuild."""
        raise PermanentError(f"{type(self).__name__} cannot report the mapping of {name!r}")

    def key_splits(self, name: str, parts: int) -> list[str]:
        """Up to ``parts - 1`` sort keys that cut the index into about equal ranges, ascending."""
        raise PermanentError(f"{type(self).__name__} cannot split its keys into ranges")

    # -- final ----------------------------------------------------------------------------------------
    @final
    def routings(self, name: str, ids: Sequence[str]) -> dict[str, list[str | None]]:
        """id -> the routing of each copy the index holds of it (ids it lacks are left out): what
        a delete of a routed document must carry, read without the documents' bodies."""
        found: dict[str, list[str | None]] = {}
        for doc in self.documents_by_id(name, ids, fields=[]):
            found.setdefault(doc.id, []).append(doc.routing)
        return found

    def key_ranges(self, name: str, parts: int, notes: list[str]) -> list[tuple[str | None, str | None]]:
        """About *parts* sort-key ranges ``(lo, hi)`` of *name* that cover it, unbounded at both
        ends; one range, and a line in *notes* saying why, when this backend cannot split keys.
        Verify cuts its index side with these, and change capture spreads a TRUNCATE over them."""
        splits: list[str] = []
        if parts > 1:
            try:
                splits = self.key_splits(name, parts)
            except (SparkIndexError, NotImplementedError) as exc:
                notes.append(
                    f"the index side was scanned as one range: {type(self).__name__} cannot split keys ({exc})"
                )
        edges: list[str | None] = [None, *dict.fromkeys(sorted(splits)), None]
        return list(itertools.pairwise(edges))
