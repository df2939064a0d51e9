"""The backends the target conformance suite runs against, each with what it can and cannot do.

Modelled on dlt's ``destinations_configs`` and singer-sdk's test factory: one description per
backend, and the suite asks it for capabilities instead of branching on names. The search
engines are osmem-server, a TEST DOUBLE, behind an :class:`HttpProxy` that plays one engine
version's personality (Elasticsearch 7.17, 8, 9; OpenSearch 1.3, 2, 3; Amazon OpenSearch Service
with SigV4; see :mod:`tests.support.personalities`) and injects faults.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import tantivy

from sparkindex.checksums import CHECK_FIELDS
from sparkindex.targets.base import version_name
from sparkindex.targets.registry import open_target
from sparkindex.targets.search_engine.mapping import creation_settings, index_mapping
from sparkindex.targets.tantivy.client import MAPPING_FILE, STATE_FILE, TantivyTarget
from sparkindex.targets.tantivy.schema import build_schema
from sparkindex.targets.target import Target
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import OsmemCluster
from tests.support.personalities import ALL, BY_KEY, Personality


@dataclass
class Backend:
    name: str
    url: str
    base_dir: Path
    options: dict[str, Any]
    #: honours BulkItem.version (an older write never replaces a newer one)
    external_versions: bool
    #: can report transient per-item failures (a search engine's 429 per item)
    transient_items: bool
    #: faults injected between target and server, where there is a server
    proxy: HttpProxy | None = None
    #: the index's settings as the server holds them (number_of_replicas, refresh_interval)
    settings_of: Callable[[str], dict[str, Any]] | None = None
    #: makes the next version of an alias as a sparkindex from before range checks did
    old_version: Callable[[Target, str, dict[str, Any]], str] | None = None

    def open(self, **options: Any) -> Target:
        return open_target(self.url, self.base_dir, {**self.options, **options})

    def create_old_version(self, target: Target, alias: str, mapping: dict[str, Any]) -> str:
        """The next version of *alias*, created the way sparkindex did before indexes stored
        range checks: without the check fields (so its documents cannot hold them)."""
        assert self.old_version is not None, f"{self.name} cannot make an old version"
        return self.old_version(target, alias, mapping)


def _next_version(target: Target, alias: str) -> str:
    return version_name(alias, len(target.list_versions(alias)) + 1)


def _tantivy_old_version(target: Target, alias: str, mapping: dict[str, Any]) -> str:
    """What TantivyTarget.create_version wrote before: the schema of the mapping as it is, and
    the mapping stored without the marker that adds the check fields."""
    assert isinstance(target, TantivyTarget)
    index = _next_version(target, alias)
    path = target.root / index
    path.mkdir(parents=True)
    tantivy.Index(build_schema(mapping)[0], path=str(path), reuse=False)
    (path / STATE_FILE).write_bytes(orjson.dumps({"state": "building", "created_at": time.time(), "staged": False}))
    (path / MAPPING_FILE).write_bytes(orjson.dumps(mapping))
    return index


def _engine_old_version(cluster: OsmemCluster) -> Callable[[Target, str, dict[str, Any]], str]:
    def old_version(target: Target, alias: str, mapping: dict[str, Any]) -> str:
        """The index body the engines were sent before: today's without the check fields, put
        straight to the server."""
        index = _next_version(target, alias)
        meta = {"alias": alias, "mapping": mapping, "settings": {}, "state": "building"}
        body = index_mapping(mapping, index, meta)
        for name in CHECK_FIELDS:
            del body["properties"][name]
        cluster.request("PUT", f"/{index}", {"settings": creation_settings({}), "mappings": body})
        return index

    return old_version


def _engine_settings(cluster: OsmemCluster) -> Callable[[str], dict[str, Any]]:
    def settings_of(index: str) -> dict[str, Any]:
        found = cluster.request("GET", f"/{index}/_settings")
        assert isinstance(found, dict)
        return dict(found[index]["settings"]["index"])

    return settings_of


BACKENDS = ["tantivy", *(p.key for p in ALL)]


def personality_options(persona: Personality, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The target options a personality needs (SigV4: the region, and the test key in the
    environment, where botocore's standard chain finds it)."""
    if persona.sigv4 is None:
        return {}
    key = persona.sigv4
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key.secret_key)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return {"aws_region": key.region, "aws_service": key.service}


def make_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if name == "tantivy":
        options = {"service_idle_s": 5}
        yield Backend("tantivy", "tantivy://index", tmp_path, options, False, False, old_version=_tantivy_old_version)
        return
    persona = BY_KEY[name]
    cluster: OsmemCluster = request.getfixturevalue("osmem_cluster")
    proxy = HttpProxy(cluster.url, personality=persona)
    url = f"{persona.scheme}://{proxy.host_port}"
    # no client-level retries: the suite sees every fault it injects
    if persona.is_elasticsearch and os.environ.get("SPARKINDEX_TEST_NEGOTIATION") == "off":
        # what a client pinned to major 9 sends: the 7 and 8 personalities must refuse it
        options_extra: dict[str, Any] = {"engine_version": "9.1"}
    else:
        options_extra = {}
    options = {
        **options_extra,
        "max_retries": 0,
        "request_timeout_s": 10,
        **personality_options(persona, request.getfixturevalue("monkeypatch")),
    }
    try:
        yield Backend(
            name, url, tmp_path, options, True, True, proxy, _engine_settings(cluster), _engine_old_version(cluster)
        )
    finally:
        proxy.close()
