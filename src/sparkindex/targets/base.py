"""The target interface every search backend implements.

Shaped after what OpenSearch and Elasticsearch offer, so that they and the embedded Tantivy
backend are interchangeable: versioned physical indexes (``<alias>_v<N>``), bulk writes with one
result per document, an atomic and fenced alias swap, and scans of ids and content hashes for
verification. Required hooks are abstract; the naming of versions is final and shared.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

_VERSION = re.compile(r"^(?P<alias>.+)_v(?P<n>\d+)$")


def version_name(alias: str, n: int) -> str:
    return f"{alias}_v{n}"


def version_number(alias: str, index: str) -> int | None:
    m = _VERSION.match(index)
    if m is None or m["alias"] != alias:
        return None
    return int(m["n"])


@dataclass(frozen=True)
class BulkDocument:
    id: str
    source: bytes  # canonical JSON of the document
    hash: str


@dataclass(frozen=True)
class BulkItemResult:
    id: str
    ok: bool
    error: str | None = None
    error_class: str | None = None
    transient: bool = False


@dataclass(frozen=True)
class SearchHit:
    id: str
    score: float
    source: dict[str, Any]


class Target(ABC):
    """A search backend. One instance per process; cheap to create from a URL."""

    @abstractmethod
    def create_version(self, alias: str, mapping: dict[str, Any]) -> str:
        """Create the next physical index for *alias* with bulk-load settings; return its name."""

    @abstractmethod
    def version_exists(self, index: str) -> bool: ...

    @abstractmethod
    def bulk(self, index: str, docs: Sequence[BulkDocument], assume_new: bool = False) -> list[BulkItemResult]:
        """Upsert *docs* by id; one result per document, in order. Whole-request failures raise.

        *assume_new*: the caller guarantees no id was written to *index* before (the first claim
        of a partition in a fresh version), so a backend may skip its overwrite lookup.
        """

    @abstractmethod
    def finish_version(self, index: str) -> None:
        """Restore search-time settings after the bulk load (refresh, replicas, merges)."""

    @abstractmethod
    def swap_alias(self, alias: str, index: str, fence: int) -> str | None:
        """Point *alias* at *index* atomically, refusing a *fence* older than the last swap's.

        Returns the index the alias pointed at before, if any.
        """

    @abstractmethod
    def alias_target(self, alias: str) -> str | None: ...

    @abstractmethod
    def list_versions(self, alias: str) -> list[str]:
        """Physical indexes of *alias*, oldest first."""

    @abstractmethod
    def delete_version(self, index: str) -> None: ...

    @abstractmethod
    def count(self, name: str) -> int:
        """Documents in an index, or behind an alias."""

    @abstractmethod
    def scan_hashes(self, name: str) -> Iterator[tuple[str, str]]:
        """Every (document id, content hash) in an index or behind an alias."""

    @abstractmethod
    def search(self, name: str, query: str, limit: int = 10) -> list[SearchHit]: ...

    def close(self) -> None:
        """Release connections or handles; optional."""

    def prune_versions(self, alias: str, keep: int) -> list[str]:
        """Delete all but the newest *keep* versions, never the one the alias points at."""
        current = self.alias_target(alias)
        versions = self.list_versions(alias)
        doomed = [v for v in versions[: max(0, len(versions) - keep)] if v != current]
        for index in doomed:
            self.delete_version(index)
        return doomed
