"""The backends the target conformance suite runs against, each with what it can and cannot do.

Modelled on dlt's ``destinations_configs`` and singer-sdk's test factory: one description per
backend, and the suite asks it for capabilities instead of branching on names. The search
engines are osmem-server, a TEST DOUBLE, behind an :class:`HttpProxy` that plays one engine
version's personality (Elasticsearch 7.17, 8, 9; OpenSearch 1.3, 2, 3; Amazon OpenSearch Service
with SigV4; see :mod:`tests.support.personalities`) and injects faults.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkindex.targets.registry import open_target
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

    def open(self, **options: Any) -> Target:
        return open_target(self.url, self.base_dir, {**self.options, **options})


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
        yield Backend("tantivy", "tantivy://index", tmp_path, {"service_idle_s": 5}, False, False)
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
        yield Backend(name, url, tmp_path, options, True, True, proxy, _engine_settings(cluster))
    finally:
        proxy.close()
