"""``sync.offsets: target``: consumer offsets in an index of the search engine itself.

Offsets kept beside the data, as Kafka keeps its consumers' offsets in a topic. One small index
(``sync.offsets_index``, one shard) holds:

* a **checkpoint** document per consumer group and alias (``checkpoint:<ns>:<group>:<alias>``):
  the acknowledged position, the source's resume offset, the physical index and running counts;
* a **processed-event** document per acknowledged batch and alias
  (``processed:<ns>:<group>:<alias>:<position>``), written in the same bulk request just before
  the checkpoint.

Several pipelines may share the index (and group names such as ``default``): every document
carries its pipeline's *namespace* (:func:`sparkindex.capture.consumer_offsets.offsets_namespace`)
and every read and delete is limited to it.

Why both: a bulk request is not a transaction. Should the checkpoint be lost while its batch's
processed event was written (a crash between the two), :meth:`IndexOffsets.offsets` adopts the
newer processed event: its batch was acknowledged by the target before it was recorded, so the
replay after the crash skips it rather than applying it twice. A bounded in-memory cache of the
checkpoints this process wrote itself (``sync.offsets_cache`` entries) spares that second search
while the index holds exactly what the process wrote, which is every read of a running sync.
Processed events older than ``sync.offsets_retention_days`` are deleted, at most once an hour, by
the sync that writes them; the checkpoints stay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson

from sparkindex.coordination.offsets import GroupOffset
from sparkindex.errors import PermanentError, SparkIndexError, TransientError
from sparkindex.targets.search_engine.api import EngineApi
from sparkindex.targets.search_engine.errors import HttpFailure, describe_error, is_transient_status

log = logging.getLogger(__name__)

#: how often a writer deletes processed events past their retention
PRUNE_EVERY_S = 3600.0
#: checkpoints and processed events read per search (groups and aliases are few)
PAGE = 10_000

MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "doc_type": {"type": "keyword"},
        "namespace": {"type": "keyword"},  # the pipeline whose offsets these are
        "consumer_group": {"type": "keyword"},
        "source_index": {"type": "keyword"},  # the alias whose changes the group applies
        "event_id": {"type": "keyword"},
        "position": {"type": "long"},
        "offset": {"type": "object", "enabled": False},  # the source's resume offset, kept as given
        "index_name": {"type": "keyword"},
        "applied": {"type": "long"},
        "deleted": {"type": "long"},
        "lag_s": {"type": "double"},
        "retained_bytes": {"type": "long"},
        "checkpoint_timestamp": {"type": "date", "format": "epoch_millis"},
        "created_at": {"type": "date", "format": "epoch_millis"},
        "updated_at": {"type": "date", "format": "epoch_millis"},
    },
}
SETTINGS: dict[str, Any] = {"number_of_shards": 1}


def checkpoint_id(namespace: str, group: str, alias: str) -> str:
    return f"checkpoint:{namespace}:{group}:{alias}"


def processed_id(namespace: str, group: str, alias: str, event_id: str) -> str:
    return f"processed:{namespace}:{group}:{alias}:{event_id}"


class IndexOffsets:
    """:class:`~sparkindex.coordination.offsets.ConsumerOffsets` in the engine's *index*."""

    def __init__(self, api: EngineApi, index: str, namespace: str, retention_s: float, cache_size: int) -> None:
        self.api = api
        self.index = index
        self.namespace = namespace
        self.retention_s = retention_s
        self.cache_size = cache_size
        #: (group, alias) -> the position this process last wrote for it, newest last
        self._written: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()
        self._ready = False
        self._next_prune = 0.0

    # -- reading -----------------------------------------------------------------------------------
    def offsets(self, group: str) -> dict[str, GroupOffset]:
        found = {o.alias: o for o in self._checkpoints([{"term": {"consumer_group": group}}])}
        if found and all(self._wrote(group, o.alias) == o.position for o in found.values()):
            return found  # what this process wrote itself: no processed event can be past it
        for event in self._processed_after(group, found):
            current = found.get(event.alias)
            if current is None or event.position > current.position:
                found[event.alias] = event  # its checkpoint was lost after the batch was acknowledged
        return found

    def every_group(self) -> list[GroupOffset]:
        return self._checkpoints([])

    def groups_of(self, alias: str) -> list[GroupOffset]:
        return self._checkpoints([{"term": {"source_index": alias}}])

    # -- writing -----------------------------------------------------------------------------------
    def save(
        self,
        group: str,
        positions: Mapping[str, tuple[int, dict[str, Any], str | None]],
        counts: Mapping[str, tuple[int, int]] | None = None,
        lag_s: float = 0.0,
        retained_bytes: int | None = None,
    ) -> None:
        self._ensure()
        now_ms = int(time.time() * 1000)
        current = self._current(group, list(positions))
        lines: list[bytes] = []
        written: list[tuple[str, int]] = []
        for alias, (position, offset, index) in positions.items():
            applied, deleted = (counts or {}).get(alias, (0, 0))
            event = str(position)
            before = current.get(alias)
            common = {
                "namespace": self.namespace,
                "consumer_group": group,
                "source_index": alias,
                "position": position,
                "offset": offset,
                "index_name": index,
            }
            processed = {**common, "doc_type": "processed_event", "event_id": event, "created_at": now_ms}
            checkpoint = {
                **common,
                "doc_type": "checkpoint",
                "applied": (before.applied if before else 0) + applied,
                "deleted": (before.deleted if before else 0) + deleted,
                "lag_s": lag_s,
                "retained_bytes": retained_bytes,
                "checkpoint_timestamp": now_ms,
                "updated_at": now_ms,
            }
            for doc_id, doc in (
                (processed_id(self.namespace, group, alias, event), processed),
                (checkpoint_id(self.namespace, group, alias), checkpoint),
            ):
                lines.append(orjson.dumps({"index": {"_index": self.index, "_id": doc_id}}))
                lines.append(orjson.dumps(doc))
            written.append((alias, position))
        if lines:
            self._bulk(lines, "saving consumer offsets")
        for alias, position in written:
            self._remember(group, alias, position)
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + PRUNE_EVERY_S
            try:
                self.prune(time.time())
            except SparkIndexError as exc:  # the batch is acknowledged: pruning waits for the next hour
                log.warning("pruning processed events in %r failed (tried again in an hour): %s", self.index, exc)

    def forget(self, group: str, aliases: Sequence[str] | None = None) -> None:
        self._ensure()
        filters: list[dict[str, Any]] = [{"term": {"namespace": self.namespace}}, {"term": {"consumer_group": group}}]
        if aliases is not None:
            filters.append({"terms": {"source_index": list(aliases)}})
        self._delete_where(filters, f"forgetting the offsets of group {group!r}")
        with self._lock:
            for key in [k for k in self._written if k[0] == group and (aliases is None or k[1] in aliases)]:
                del self._written[key]

    def prune(self, now: float) -> int:
        """Delete processed events recorded before *now* minus the retention; returns how many."""
        cutoff_ms = int((now - self.retention_s) * 1000)
        filters: list[dict[str, Any]] = [
            {"term": {"doc_type": "processed_event"}},
            {"term": {"namespace": self.namespace}},
            {"range": {"created_at": {"lt": cutoff_ms}}},
        ]
        return self._delete_where(filters, "deleting processed events past their retention")

    # -- plumbing ----------------------------------------------------------------------------------
    def _ensure(self) -> None:
        """Create the offsets index on first use (another process may be creating it too)."""
        if self._ready:
            return
        body = {"mappings": MAPPING, "settings": SETTINGS}
        try:
            self.api.raw("PUT", f"/{quote(self.index)}", body)
        except HttpFailure as failure:
            if failure.error_type != "resource_already_exists_exception":
                raise self._error(failure, f"creating the offsets index {self.index!r}") from None
        self._ready = True

    def _checkpoints(self, filters: list[dict[str, Any]]) -> list[GroupOffset]:
        mine = [{"term": {"doc_type": "checkpoint"}}, {"term": {"namespace": self.namespace}}, *filters]
        return [_offset(src) for src in self._search(mine)]

    def _processed_after(self, group: str, checkpoints: Mapping[str, GroupOffset]) -> list[GroupOffset]:
        """The newest processed event of each alias of *group* past its checkpoint (normally
        none). Each search asks for the newest event of an alias not seen yet, so there is one
        search per alias with events and one more, each returning a single document (the aliases
        are not known in advance: a crash may come before an alias's first checkpoint)."""
        base = [
            {"term": {"doc_type": "processed_event"}},
            {"term": {"namespace": self.namespace}},
            {"term": {"consumer_group": group}},
            {"exists": {"field": "source_index"}},
        ]
        newest: dict[str, GroupOffset] = {}
        for _ in range(PAGE):  # aliases are few; the bound only stops an engine that misbehaves
            seen = [{"terms": {"source_index": sorted(newest)}}] if newest else []
            hits = self._search(base, size=1, newest_first=True, excluding=seen)
            if not hits:
                break
            event = _offset(hits[0])
            if event.alias in newest:
                raise PermanentError(
                    f"offsets index {self.index!r} answered a search for aliases other than "
                    f"{sorted(newest)} with {event.alias!r}: the engine ignored must_not"
                )
            newest[event.alias] = event
        else:
            raise PermanentError(f"offsets index {self.index!r}: more than {PAGE} aliases in group {group!r}")
        return [
            event
            for alias, event in sorted(newest.items())
            if alias not in checkpoints or event.position > checkpoints[alias].position
        ]

    def _current(self, group: str, aliases: list[str]) -> dict[str, GroupOffset]:
        ids = [checkpoint_id(self.namespace, group, a) for a in aliases]
        got = self.api.call("POST", f"/{quote(self.index)}/_mget", "reading checkpoints", {"ids": ids})
        docs = [d["_source"] for d in (got or {}).get("docs", []) if d.get("found")]
        return {o.alias: o for o in map(_offset, docs)}

    def _search(
        self,
        filters: list[dict[str, Any]],
        size: int = PAGE,
        newest_first: bool = False,
        excluding: list[dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        self._ensure()
        order = "desc" if newest_first else "asc"
        query: dict[str, Any] = {"filter": filters}
        if excluding:
            query["must_not"] = excluding
        body = {"query": {"bool": query}, "size": size, "sort": [{"position": order}]}
        got = self.api.call("POST", f"/{quote(self.index)}/_search", f"reading offsets from {self.index!r}", body)
        return [h["_source"] for h in got["hits"]["hits"]]

    def _bulk(self, lines: list[bytes], what: str) -> None:
        body = b"\n".join(lines) + b"\n"
        try:
            got = self.api.raw("POST", "/_bulk", params={"refresh": "true"}, ndjson_body=body)
        except HttpFailure as failure:
            raise self._error(failure, what) from None
        if not got.get("errors"):
            return
        for item in got.get("items", []):
            result = next(iter(item.values()))
            if result.get("status", 200) >= 300:
                error_type, reason = describe_error(result.get("error"))
                item_failure = HttpFailure(int(result["status"]), error_type, reason)
                raise self._error(item_failure, f"{what} ({result.get('_id')})")

    def _delete_where(self, filters: list[dict[str, Any]], what: str) -> int:
        body = {"query": {"bool": {"filter": filters}}}
        got = self.api.call(
            "POST",
            f"/{quote(self.index)}/_delete_by_query",
            what,
            body,
            params={"refresh": "true", "conflicts": "proceed"},
        )
        return int((got or {}).get("deleted", 0))

    def _remember(self, group: str, alias: str, position: int) -> None:
        with self._lock:
            self._written[(group, alias)] = position
            self._written.move_to_end((group, alias))
            while len(self._written) > self.cache_size:
                self._written.popitem(last=False)

    def _wrote(self, group: str, alias: str) -> int | None:
        with self._lock:
            return self._written.get((group, alias))

    def _error(self, failure: HttpFailure, what: str) -> TransientError | PermanentError:
        text = f"{what} in {self.index!r} on {self.api.where}: {failure.status} {failure.error_type}: {failure.reason}"
        return TransientError(text) if is_transient_status(failure.status) else PermanentError(text)


def _offset(src: Mapping[str, Any]) -> GroupOffset:
    updated = src.get("updated_at") or src.get("created_at") or 0
    return GroupOffset(
        str(src["consumer_group"]),
        str(src["source_index"]),
        int(src["position"]),
        dict(src.get("offset") or {}),
        src.get("index_name"),
        int(src.get("applied") or 0),
        int(src.get("deleted") or 0),
        float(src.get("lag_s") or 0.0),
        float(updated) / 1000.0,
    )
