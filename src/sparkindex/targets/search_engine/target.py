"""The Target interface for HTTP search engines (OpenSearch, Elasticsearch), shared by both.

A backend subclass fills in two hooks: :meth:`SearchEngineTarget._connect` (its client, reduced
to a :class:`~.api.Transport`) and its config class. On the first request the server is
identified (``GET /``, or the version the config declares) and refused if sparkindex cannot serve
it; the transport then talks to it in what its version accepts (:mod:`.engine`). Everything
engine-neutral lives here and in this package's modules: index bodies (``mapping``), bulk requests and item
classification (``bulk``), the alias compare-and-swap and fences (``aliases``), reads (``reads``).

One instance is shared by the threads of a worker process (the partition worker keeps several
bulks in flight): the client is thread-safe and created once, under a lock; nothing else here
holds mutable state but small caches written whole.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from sparkindex.checksums import KeyCheck, RangeChecksum
from sparkindex.errors import ConfigError, PermanentError, TransientError
from sparkindex.targets.base import (
    BulkItem,
    BulkItemResult,
    KeyBounds,
    SearchHit,
    StoredDocument,
    version_name,
    version_number,
)
from sparkindex.targets.offsets_host import OffsetsHost
from sparkindex.targets.search_engine import aliases, reads
from sparkindex.targets.search_engine.api import EngineApi, Transport
from sparkindex.targets.search_engine.bulk import refused_checks, write_bulk
from sparkindex.targets.search_engine.config import SearchEngineConfig
from sparkindex.targets.search_engine.engine import (
    Distribution,
    EngineInfo,
    declared,
    identify,
    refuse_serverless,
    require_supported,
)
from sparkindex.targets.search_engine.errors import HttpFailure, request_error
from sparkindex.targets.search_engine.mapping import (
    META_KEY,
    check_vector_types,
    creation_settings,
    declares_checks,
    index_mapping,
    normalize_settings,
    restored_settings,
    text_fields,
)
from sparkindex.targets.search_engine.offsets import IndexOffsets
from sparkindex.targets.target import Target
from sparkindex.targets.writer import unmanaged_index_message


def _meta(alias: str, mapping: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """What a version remembers about itself (in its mapping's ``_meta``): the mapping as the
    planner gave it (read back by :meth:`SearchEngineTarget.mapping`), the index's own settings
    (restored after the bulk load) and its state."""
    return {"alias": alias, "mapping": mapping, "settings": settings, "state": "building"}


C = TypeVar("C", bound=SearchEngineConfig)


class SearchEngineTarget(Target, OffsetsHost, Generic[C]):
    #: the engine's name in messages ("OpenSearch")
    ENGINE = "search engine"
    #: the engine a server behind this backend's scheme must be
    DISTRIBUTION: Distribution = "opensearch"
    #: how long the identifying ``GET /`` may take at most
    IDENTIFY_TIMEOUT_S = 30.0
    supports_join = True
    supports_routing = True
    honours_versions = True  # every write carries version_type=external_gte (bulk.py)
    lists_key_checks = True  # a composite aggregation over _key (reads.key_checks)

    def __init__(self, config: C) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._api: EngineApi | None = None
        self._text_fields: dict[str, list[str]] = {}
        #: name written to -> whether its index declares the check fields (see :meth:`bulk`)
        self._checks: dict[str, bool] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.describe()})"

    # -- hooks ---------------------------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Transport:
        """The backend's client for :attr:`config`, as a transport (called once, lazily)."""

    # -- plumbing ------------------------------------------------------------------------------------
    @property
    def api(self) -> EngineApi:
        api = self._api
        if api is None:
            with self._lock:
                if self._api is None:
                    self._api = self._open_api()
                api = self._api
        return api

    @property
    def engine(self) -> EngineInfo:
        """The server this target talks to (connects and identifies it on first use)."""
        return self.api.engine

    def _open_api(self) -> EngineApi:
        where = f"{self.ENGINE} at {self.config.describe()}"
        if getattr(self.config, "serverless", False):
            refuse_serverless(where)  # before the client walks the credential chain
        transport = self._connect()
        try:
            engine = self._identify(transport, where)
            require_supported(engine, self.DISTRIBUTION, where)
            transport.speak(engine)
        except BaseException:
            transport.close()
            raise
        return EngineApi(transport, where, engine)

    def _identify(self, transport: Transport, where: str) -> EngineInfo:
        """The engine and version: declared in the config, or read from the server's root."""
        if self.config.engine_version is not None:
            return declared(self.DISTRIBUTION, self.config.engine_version)
        timeout = min(self.IDENTIFY_TIMEOUT_S, self.config.request_timeout_s)
        try:
            body, headers = transport.root(timeout)
        except HttpFailure as failure:
            raise request_error(failure, "reading the server's version (GET /)", where) from None
        return identify(body, headers, where)

    def close(self) -> None:
        with self._lock:
            api, self._api = self._api, None
        if api is not None:
            api.transport.close()

    def _refresh(self, name: str) -> None:
        if self.config.refresh_before_read:
            self.api.call("POST", f"/{quote(name)}/_refresh", f"refreshing {name!r}")

    # -- versions ------------------------------------------------------------------------------------
    def create_version(
        self, alias: str, mapping: dict[str, Any], settings: dict[str, Any] | None = None, *, adopt: bool = False
    ) -> str:
        user = normalize_settings(settings, f"indexes[{alias}].settings")
        check_vector_types(mapping, self.ENGINE, alias)
        if not adopt and self.unmanaged_index(alias):
            raise ConfigError(unmanaged_index_message(alias, self.ENGINE))
        for _ in range(5):  # another process may take a number at the same moment: take the next
            existing = [version_number(alias, v) or 0 for v in self.list_versions(alias)]
            index = version_name(alias, max(existing, default=0) + 1)
            body = {
                "settings": creation_settings(user),
                "mappings": index_mapping(mapping, index, _meta(alias, mapping, user)),
            }
            try:
                self.api.raw("PUT", f"/{quote(index)}", body)
                self._checks[index] = True  # index_mapping declares the check fields
                return index
            except HttpFailure as failure:
                if failure.error_type == "resource_already_exists_exception":
                    continue
                if failure.status == 400:
                    raise ConfigError(
                        f"index {index!r} (alias {alias!r}): the {self.ENGINE} refused its mapping or settings: "
                        f"{failure.error_type}: {failure.reason}"
                    ) from None
                raise request_error(failure, f"creating index {index!r}", self.api.where) from None
        raise TransientError(f"could not create a new version of alias {alias!r}: every number was taken meanwhile")

    def unmanaged_index(self, alias: str) -> bool:
        return alias in self._indexes_named(alias, f"checking that {alias!r} is free for an alias")

    def version_exists(self, index: str) -> bool:
        return index in self._indexes_named(index, f"looking up index {index!r}")

    def _indexes_named(self, prefix: str, what: str, pattern: str = "*") -> dict[str, Any]:
        """Indexes whose names start with *prefix* (a wildcard, so that a missing name is an
        empty answer rather than a 404 the clients log as a failure)."""
        found = self.api.call("GET", f"/{quote(prefix)}{pattern}/_settings/index.provided_name", what)
        return dict(found or {})

    def list_versions(self, alias: str) -> list[str]:
        found = self._indexes_named(alias, f"listing versions of {alias!r}", "_v*")
        numbered = [(n, name) for name in found if (n := version_number(alias, name)) is not None]
        return [name for _, name in sorted(numbered)]

    def delete_version(self, index: str) -> None:
        found = self.api.call("GET", f"/{quote(index)}*/_alias", f"reading aliases of {index!r}")
        held = sorted((found or {}).get(index, {}).get("aliases") or {})
        if held:
            raise PermanentError(f"index {index!r} is behind alias {held[0]!r}; swap the alias first")
        self.api.call("DELETE", f"/{quote(index)}", f"deleting index {index!r}", missing_ok=True)

    def _meta(self, index: str) -> dict[str, Any]:
        return dict(reads.mapping_of(self.api, index).get("_meta") or {})

    def finish_version(self, index: str) -> None:
        meta = self._meta(index)
        own = dict(meta.get(META_KEY) or {})
        user = dict(own.get("settings") or {})
        self.api.call(
            "PUT", f"/{quote(index)}/_settings", f"restoring the settings of {index!r}", restored_settings(user)
        )
        self.api.call("POST", f"/{quote(index)}/_refresh", f"refreshing {index!r}")
        self._wait_for_health(index)
        meta[META_KEY] = {**own, "state": "ready"}
        self.api.call("PUT", f"/{quote(index)}/_mapping", f"marking {index!r} ready", {"_meta": meta})

    def _wait_for_health(self, index: str) -> None:
        status = self.config.wait_for_status
        if status == "none":
            return
        timeout = self.config.health_timeout_s
        health = self.api.call(
            "GET",
            f"/_cluster/health/{quote(index)}",
            f"waiting for {index!r} to be {status}",
            params={"wait_for_status": status, "timeout": f"{max(1, round(timeout))}s"},
            timeout_s=timeout + self.config.request_timeout_s,
        )
        if health.get("timed_out"):
            raise TransientError(
                f"index {index!r} did not become {status} within {timeout:g}s on the {self.ENGINE} "
                f"(it is {health.get('status')}, {health.get('unassigned_shards', '?')} shard(s) unassigned); "
                "target.options.wait_for_status / health_timeout_s set what to wait for"
            )

    # -- aliases -------------------------------------------------------------------------------------
    def alias_target(self, alias: str) -> str | None:
        return aliases.current_index(self.api, alias)

    def observe_fence(self, alias: str, fence: int) -> None:
        aliases.observe_fence(self.api, self.config.fence_index, alias, fence)

    def swap(self, alias: str, new_index: str, expected_previous: str | None, fence: int | None = None) -> None:
        if not self.version_exists(new_index):
            raise PermanentError(f"cannot point alias {alias!r} at missing index {new_index!r}")
        aliases.swap(self.api, self.config.fence_index, alias, new_index, expected_previous, fence)

    # -- writes --------------------------------------------------------------------------------------
    def bulk(self, index: str, items: Sequence[BulkItem]) -> list[BulkItemResult]:
        checks = any(item.check is not None for item in items) and self._writes_checks(index)
        results = write_bulk(self.api, self.config, index, items, checks)
        refused = [i for i, r in enumerate(results) if checks and refused_checks(r)]
        if refused:  # the name leads to an older index now (an alias moved back): send them without
            self._checks[index] = False
            again = write_bulk(self.api, self.config, index, [items[i] for i in refused], False)
            for i, result in zip(refused, again, strict=True):
                results[i] = result
        return results

    def _writes_checks(self, index: str) -> bool:
        """Whether documents written to *index* (an index or an alias) carry their checks: whether
        its mapping declares the check fields, read once per name (an index this target created
        is known to), since a strict mapping refuses a document with fields it lacks."""
        known = self._checks.get(index)
        if known is None:
            mapping = reads.mapping_if_exists(self.api, index)
            if mapping is None:
                return False  # no such index: the bulk answers for that, and nothing is remembered
            known = self._checks[index] = declares_checks(mapping)
        return known

    # -- reads ---------------------------------------------------------------------------------------
    def count(self, name: str) -> int:
        self._refresh(name)
        return reads.count(self.api, name)

    def scan_hashes(
        self, name: str, ids: Sequence[str] | None = None, key_range: KeyBounds | None = None
    ) -> Iterator[tuple[str, str]]:
        if ids is not None and not ids:
            return iter(())
        self._refresh(name)
        c = self.config
        return reads.scan_hashes(self.api, name, ids, key_range, c.scan_page_size, c.scroll_keep_alive)

    def read_documents(
        self,
        name: str,
        key_range: KeyBounds | None = None,
        after: str | None = None,
        size: int = 1000,
        fields: Sequence[str] | None = None,
        query: str | None = None,
    ) -> list[StoredDocument]:
        if after is None:
            self._refresh(name)
        return reads.read_documents(self.api, name, key_range, after, size, fields, query)

    def documents_by_id(
        self, name: str, ids: Sequence[str], fields: Sequence[str] | None = None
    ) -> list[StoredDocument]:
        if not ids:
            return []
        self._refresh(name)
        c = self.config
        return list(reads.documents_by_id(self.api, name, ids, fields, c.scan_page_size, c.scroll_keep_alive))

    def count_hash_prefix(self, name: str, prefix: str) -> int:
        self._refresh(name)
        return reads.count_hash_prefix(self.api, name, prefix)

    def stores_checks(self, name: str) -> bool:
        return declares_checks(reads.mapping_of(self.api, name))

    def range_checksums(self, name: str, ranges: Sequence[KeyBounds]) -> list[RangeChecksum]:
        """The engine's sums per range; an index without the check fields is refused rather than
        reported empty. Its mapping is read only when every figure is empty, which is what such an
        index answers (the engines sum an unmapped field as one without values)."""
        self._refresh(name)
        found = reads.range_checksums(self.api, name, ranges)
        if found and all(f.count == 0 for f in found) and not self.stores_checks(name):
            raise PermanentError(
                f"index {name!r} stores no range checks (it was created by an older sparkindex): "
                "compare it document by document"
            )
        return found

    def key_checks(self, name: str, key_range: KeyBounds) -> Iterator[KeyCheck]:
        self._refresh(name)
        return reads.key_checks(self.api, name, key_range, self.config.scan_page_size)

    def mapping(self, name: str) -> dict[str, Any]:
        own = self._meta(name).get(META_KEY) or {}
        if "mapping" not in own:
            raise PermanentError(f"index {name!r} was not created by sparkindex: its mapping has no _meta.{META_KEY}")
        return dict(own["mapping"])

    def key_splits(self, name: str, parts: int) -> list[str]:
        self._refresh(name)
        return reads.key_splits(self.api, name, parts, self.config.split_sample)

    def consumer_offsets(self, index: str, namespace: str, retention_s: float, cache_size: int) -> IndexOffsets:
        return IndexOffsets(self.api, index, namespace, retention_s, cache_size)

    def search(self, name: str, query: str, limit: int = 10) -> list[SearchHit]:
        index = aliases.current_index(self.api, name) or name
        fields = self._text_fields.get(index)
        if fields is None:
            fields = self._text_fields[index] = text_fields(reads.mapping_of(self.api, index))
        return reads.search(self.api, name, query, limit, fields)
