"""The target interface every search backend implements.

Shaped after what OpenSearch and Elasticsearch offer, so that they and the embedded Tantivy
backend are interchangeable: versioned physical indexes (``<alias>_v<N>``), bulk writes with one
result per document, an atomic and fenced alias swap, and scans of ids and content hashes for
verification. Required hooks are abstract; the naming of versions is final and shared.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sparkindex.errors import ConfigError, PermanentError

if TYPE_CHECKING:
    from sparkindex.coordination.offsets import ConsumerOffsets

_VERSION = re.compile(r"^(?P<alias>.+)_v(?P<n>\d+)$")


def version_name(alias: str, n: int) -> str:
    return f"{alias}_v{n}"


def version_number(alias: str, index: str) -> int | None:
    m = _VERSION.match(index)
    if m is None or m["alias"] != alias:
        return None
    return int(m["n"])


BulkOp = Literal["index", "delete"]


@dataclass(frozen=True, slots=True)
class BulkItem:
    """One write: index (an upsert by id) or delete, as every backend's bulk API takes it.

    ``source`` is the document's canonical JSON, encoded once by the builder: the same bytes are
    hashed, sent and stored. ``fields`` is the same document as a dict when the caller still has
    it, so a backend that needs its own encoding (Tantivy) need not decode the bytes again.
    ``version`` is an external version (a newer write wins; change capture feeds log positions
    through it) and ``routing`` places child documents beside their parent. ``sort_key``
    (:func:`sparkindex.keys.sort_key`) is stored as the document's ``_key`` field, so that the
    target can hand out key ranges of what it holds.
    """

    id: str
    source: bytes | None = None
    hash: str | None = None
    op: BulkOp = "index"
    version: int | None = None
    routing: str | None = None
    fields: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    sort_key: str | None = None


@dataclass(frozen=True)
class BulkItemResult:
    id: str
    ok: bool
    error: str | None = None
    error_class: str | None = None
    transient: bool = False
    #: done, but not written: the index already holds a newer external version of the document
    #: (change capture counts it as skipped, not applied)
    obsolete: bool = False


@dataclass(frozen=True, slots=True)
class WriteMark:
    """Where an unsynced bulk landed: the writer's incarnation and the commit that will hold it.

    A writer that restarted has another ``epoch``: whatever it had not committed is gone.
    """

    epoch: str
    generation: int


#: A range of sort keys (``_key``): from the first (inclusive) up to the second (exclusive);
#: None leaves that side open.
KeyBounds = tuple[str | None, str | None]

#: The field every document stores its sort key in, and the field holding its content hash.
SORT_KEY_FIELD = "_key"
HASH_FIELD = "_hash"


@dataclass(frozen=True)
class StoredDocument:
    """A document as an index holds it, read back (verify, ``spark.read``, index-to-index)."""

    id: str
    sort_key: str | None
    hash: str | None
    source: dict[str, Any]


@dataclass(frozen=True)
class SearchHit:
    id: str
    score: float
    source: dict[str, Any]


class Stage(ABC):
    """A private writer for one partition attempt while a new version is built (see
    :meth:`Target.open_stage`): its documents become the version's only when it is sealed and
    then adopted, so an attempt that dies leaves nothing behind in the index."""

    name: str

    @abstractmethod
    def add(self, items: Sequence[BulkItem]) -> list[BulkItemResult]:
        """Add *items*; return the results of those rejected (every other item was taken: a
        result object per accepted document cost the small-document build a few percent).
        Nothing is durable before :meth:`seal`."""

    @abstractmethod
    def seal(self) -> None:
        """Make everything added durable, ready to be adopted under :attr:`name`."""

    @abstractmethod
    def discard(self) -> None:
        """Throw the attempt's writes away (it stopped, failed or lost its claim)."""


class Target(ABC):
    """A search backend. One instance per process; cheap to create from a URL."""

    #: Whether the backend can hold parent-child documents (a ``join`` field, children routed to
    #: their parent's shard). Pipelines with ``type: join`` relations are refused at planning on
    #: targets without it (exit 2), before any index is created.
    supports_join: ClassVar[bool] = False
    #: Whether the backend compares ``BulkItem.version`` itself, so that an older write never
    #: replaces a newer one (OpenSearch/Elasticsearch ``external_gte``). Change capture keeps a
    #: version ledger in the coordination store for targets that do not.
    honours_versions: ClassVar[bool] = False

    @abstractmethod
    def create_version(self, alias: str, mapping: dict[str, Any], settings: dict[str, Any] | None = None) -> str:
        """Create the next physical index for *alias* with bulk-load settings; return its name.

        *settings* are the index's own (``indexes[].settings`` in the pipeline: analysis, shards,
        replicas), restored by :meth:`finish_version`; a backend without such settings ignores
        them.
        """

    @abstractmethod
    def version_exists(self, index: str) -> bool: ...

    @abstractmethod
    def bulk(self, index: str, items: Sequence[BulkItem]) -> list[BulkItemResult]:
        """Apply *items* (upserts and deletes by id); one result per item, in order.

        A result is ok only once the item is durable in the index: callers move cursors on it.
        Whole-request failures raise (:class:`TransientError` when a retry may succeed).
        """

    def bulk_unsynced(self, index: str, items: Sequence[BulkItem]) -> tuple[list[BulkItemResult], WriteMark | None]:
        """Apply *items* without waiting for them to be durable; :meth:`sync` makes them so.

        For backends whose durability comes in groups (a Tantivy commit): a caller keeps reading
        while the backend batches commits, and moves its cursors after a sync. The default is
        :meth:`bulk`, already durable (no mark).
        """
        return self.bulk(index, items), None

    def sync(self, index: str, mark: WriteMark) -> None:
        """Make every write up to *mark* durable. Raises :class:`WritesLost` if the writer
        restarted since (its uncommitted writes are gone: redo them), :class:`TransientError` if
        it cannot be reached. Only called with marks from :meth:`bulk_unsynced`."""

    def open_stage(self, index: str, name: str) -> Stage | None:
        """A private writer for one attempt at a partition of the new version *index*, or None
        where writes go straight through :meth:`bulk` (the default). A backend whose single
        writer makes a shared write path slow (Tantivy) stages instead: *name* identifies the
        attempt (partition and claim), and :meth:`adopt_stages` later takes the ones that
        completed."""
        return None

    def adopt_stages(self, index: str, names: Collection[str]) -> int:
        """Make the sealed stages *names* part of *index* (the claims that completed their
        partitions; others are thrown away); return how many documents they added. Called once
        every partition is done, before :meth:`finish_version`; safe to call again."""
        return 0

    @abstractmethod
    def finish_version(self, index: str) -> None:
        """Restore search-time settings after the bulk load (refresh, replicas, merges)."""

    @abstractmethod
    def swap(self, alias: str, new_index: str, expected_previous: str | None, fence: int | None = None) -> None:
        """Point *alias* at *new_index* atomically, only if it still points at *expected_previous*.

        A compare-and-swap: a job that read the alias before another job moved it is refused with
        :class:`LockLost`, as is a *fence* older than one :meth:`observe_fence` has recorded.
        """

    def observe_fence(self, alias: str, fence: int) -> None:
        """Record a lock's new fencing token for *alias*, where the backend can keep one; optional.

        Called when the lock is acquired, so that a swap by an earlier holder is refused even if
        no swap happened in between.
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
    def scan_hashes(
        self, name: str, ids: Sequence[str] | None = None, key_range: KeyBounds | None = None
    ) -> Iterator[tuple[str, str]]:
        """(document id, content hash) of every document, of those with the given *ids*, or of
        those whose sort key lies in *key_range*.

        A document stored twice under one id is yielded twice: that is how verify sees duplicates.
        """

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

    def mapping(self, name: str) -> dict[str, Any]:
        """The mapping index or alias *name* was created with, as :meth:`create_version` took it
        (``{"properties": ...}``, without the backend's own fields such as ``_key``/``_hash``):
        the schema of an index read back into Spark and the base of an index-to-index rebuild."""
        raise PermanentError(f"{type(self).__name__} cannot report the mapping of {name!r}")

    def key_splits(self, name: str, parts: int) -> list[str]:
        """Up to ``parts - 1`` sort keys that cut the index into about equal ranges, ascending."""
        raise PermanentError(f"{type(self).__name__} cannot split its keys into ranges")

    @abstractmethod
    def search(self, name: str, query: str, limit: int = 10) -> list[SearchHit]: ...

    def close(self) -> None:
        """Release connections or handles; optional."""

    def consumer_offsets(self, index: str, namespace: str, retention_s: float, cache_size: int) -> ConsumerOffsets:
        """``sync.offsets: target``: consumer offsets kept in an index of this target named
        *index*, under *namespace* (one pipeline's). Only backends with indexes to spare offer it."""
        raise ConfigError(
            f"sync.offsets: target: {type(self).__name__} cannot keep consumer offsets in an index of its own; "
            "use sync.offsets: store (the coordination store)"
        )

    def prune_versions(self, alias: str, keep: int) -> list[str]:
        """Delete all but the newest *keep* versions, never the one the alias points at."""
        current = self.alias_target(alias)
        versions = self.list_versions(alias)
        doomed = [v for v in versions[: max(0, len(versions) - keep)] if v != current]
        for index in doomed:
            self.delete_version(index)
        return doomed
