"""The writing capability of a target: versions, bulk writes, stages, the fenced swap, pruning.

A reindex creates a version (``<alias>_v<N>``), fills it (straight through :meth:`TargetWriter.bulk`
or, on a backend that stages, through one private :class:`Stage` per partition attempt, adopted
once the partitions are done), finishes it and swaps the alias over, fenced; change capture and
repairs write into the current version through the same bulk. Required hooks are abstract,
optional ones empty (a backend without group commits or stages needs none of them), and
:meth:`TargetWriter.prune_versions`, built on the hooks, is final.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any, ClassVar, final

from sparkindex.targets.base import BulkItem, BulkItemResult, TargetHandle, WriteMark


class Stage(ABC):
    """A private writer for one partition attempt while a new version is built (see
    :meth:`TargetWriter.open_stage`): its documents become the version's only when it is sealed
    and then adopted, so an attempt that dies leaves nothing behind in the index."""

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


def unmanaged_index_message(alias: str, engine: str) -> str:
    """Why a reindex refuses an alias whose name is an index it did not make, and the way out."""
    return (
        f"alias {alias!r}: an index of that very name exists on the {engine} and is not a sparkindex version, "
        f"so no alias can take its name. `sparkindex reindex --adopt` builds {alias}_v1, then in one _aliases "
        f"request deletes the index {alias!r} and points the alias {alias!r} at {alias}_v1 (nothing is deleted "
        "without --adopt); or reindex under another alias"
    )


class TargetWriter(TargetHandle):
    """A backend as the jobs that build and change its indexes see it."""

    #: Whether the backend can hold parent-child documents (a ``join`` field, children routed to
    #: their parent's shard). Pipelines with ``type: join`` relations are refused at planning on
    #: targets without it (exit 2), before any index is created.
    supports_join: ClassVar[bool] = False
    #: whether documents can be routed to shards by a value of their own (indexes[].routing)
    supports_routing: ClassVar[bool] = False
    #: Whether the backend compares ``BulkItem.version`` itself, so that an older write never
    #: replaces a newer one (OpenSearch/Elasticsearch ``external_gte``). Change capture keeps a
    #: version ledger in the coordination store for targets that do not.
    honours_versions: ClassVar[bool] = False

    # -- versions: required ---------------------------------------------------------------------------
    @abstractmethod
    def create_version(
        self, alias: str, mapping: dict[str, Any], settings: dict[str, Any] | None = None, *, adopt: bool = False
    ) -> str:
        """Create the next physical index for *alias* with bulk-load settings; return its name.

        *settings* are the index's own (``indexes[].settings`` in the pipeline: analysis, shards,
        replicas), restored by :meth:`finish_version`; a backend without such settings ignores
        them. An index that is not a version but bears the alias's name (see
        :meth:`unmanaged_index`) is refused with :class:`ConfigError` unless *adopt*: then the
        swap replaces it.
        """

    @abstractmethod
    def version_exists(self, index: str) -> bool: ...

    @abstractmethod
    def list_versions(self, alias: str) -> list[str]:
        """Physical indexes of *alias*, oldest first."""

    @abstractmethod
    def delete_version(self, index: str) -> None: ...

    @abstractmethod
    def finish_version(self, index: str) -> None:
        """Restore search-time settings after the bulk load (refresh, replicas, merges)."""

    # -- writes: required -----------------------------------------------------------------------------
    @abstractmethod
    def bulk(self, index: str, items: Sequence[BulkItem]) -> list[BulkItemResult]:
        """Apply *items* (upserts and deletes by id); one result per item, in order.

        A result is ok only once the item is durable in the index: callers move cursors on it.
        Whole-request failures raise (:class:`TransientError` when a retry may succeed).
        """

    # -- the alias: required ----------------------------------------------------------------------------
    @abstractmethod
    def swap(self, alias: str, new_index: str, expected_previous: str | None, fence: int | None = None) -> None:
        """Point *alias* at *new_index* atomically, only if it still points at *expected_previous*.

        A compare-and-swap: a job that read the alias before another job moved it is refused with
        :class:`LockLost`, as is a *fence* older than one :meth:`observe_fence` has recorded.
        *expected_previous* equal to *alias* itself means the index of that name (an adopted,
        unmanaged index): it is deleted and the alias added in one request.
        """

    # -- optional hooks -------------------------------------------------------------------------------
    def unmanaged_index(self, alias: str) -> bool:
        """Whether an index that sparkindex did not make bears *alias*'s very name (an index a
        reindex can only adopt). False where none can exist."""
        return False

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

    def observe_fence(self, alias: str, fence: int) -> None:
        """Record a lock's new fencing token for *alias*, where the backend can keep one; optional.

        Called when the lock is acquired, so that a swap by an earlier holder is refused even if
        no swap happened in between.
        """

    # -- final ----------------------------------------------------------------------------------------
    @final
    def prune_versions(self, alias: str, keep: int) -> list[str]:
        """Delete all but the newest *keep* versions, never the one the alias points at."""
        current = self.alias_target(alias)
        versions = self.list_versions(alias)
        doomed = [v for v in versions[: max(0, len(versions) - keep)] if v != current]
        for index in doomed:
            self.delete_version(index)
        return doomed
