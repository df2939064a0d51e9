"""What every capability of a search backend speaks: the values it writes and reads back, the
naming of versions, and the handle the capabilities share.

Shaped after what OpenSearch and Elasticsearch offer, so that they and the embedded Tantivy
backend are interchangeable: versioned physical indexes (``<alias>_v<N>``), bulk writes with one
result per document, an atomic and fenced alias swap, and scans of ids and content hashes for
verification. A backend is split into capabilities, each its own base class, and a caller types
against the narrowest one it uses:

- :class:`~sparkindex.targets.writer.TargetWriter`: versions, bulk writes, stages, the fenced swap,
  pruning (:mod:`.writer`);
- :class:`~sparkindex.targets.reader.TargetReader`: hash scans, reading documents back, key
  splits, search, mappings (:mod:`.reader`);
- :class:`~sparkindex.targets.offsets_host.OffsetsHost`, optional: consumer offsets kept in an
  index of the target (:mod:`.offsets_host`).

Both the writer and the reader are a :class:`TargetHandle` (an alias's index, a count, closing);
:class:`~sparkindex.targets.target.Target` is the two together, what ``open_target`` returns. In
every base class required hooks are abstract, optional ones empty (or refusing), and the internals
built on them final; the naming of versions is final and shared.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

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
    #: the document's range check (:mod:`sparkindex.checksums`); stored where the index keeps
    #: checks, and None for what has none (a tombstone is in no range's checksum)
    check: int | None = None


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
#: The fields a soft delete adds to a document it keeps as a tombstone (``deletes: soft``; see
#: :mod:`sparkindex.documents.tombstones`). Named here because the targets map them.
DELETED_FIELD = "_deleted"
DELETED_AT_FIELD = "_deleted_at"


@dataclass(frozen=True)
class StoredDocument:
    """A document as an index holds it, read back (verify, ``spark.read``, index-to-index).

    ``routing`` is the shard routing it was written with, where the backend has routing and
    reports it (a delete must carry it, or an engine with several shards looks on another one).
    """

    id: str
    sort_key: str | None
    hash: str | None
    source: dict[str, Any]
    routing: str | None = None


@dataclass(frozen=True)
class SearchHit:
    id: str
    score: float
    source: dict[str, Any]


class TargetHandle(ABC):
    """What every capability of a backend shares: which index an alias points at, how many
    documents an index holds, and closing. One instance per process; cheap to create from a URL.
    A context manager: ``with open_target(pipeline) as target:`` (:mod:`sparkindex.resources`)
    closes it at the block's end."""

    @abstractmethod
    def alias_target(self, alias: str) -> str | None:
        """The physical index *alias* points at, or None when there is no such alias."""

    @abstractmethod
    def count(self, name: str) -> int:
        """Documents in an index, or behind an alias."""

    def close(self) -> None:
        """Release connections or handles; optional, and closing again does nothing more."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
