"""The backends the target conformance suite runs against, each with what it can and cannot do.

Modelled on dlt's ``destinations_configs`` and singer-sdk's test factory: one description per
backend, and the suite asks it for capabilities instead of branching on names. The search
engines run against osmem-server, a TEST DOUBLE, through an :class:`HttpProxy` (the fault proxy
for OpenSearch; the Elasticsearch shim, which also injects faults, for Elasticsearch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkindex.targets.registry import open_target
from sparkindex.targets.target import Target
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import OsmemCluster, elasticsearch_url, opensearch_url


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


BACKENDS = ["tantivy", "opensearch", "elasticsearch"]


def make_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if name == "tantivy":
        yield Backend("tantivy", "tantivy://index", tmp_path, {"service_idle_s": 5}, False, False)
        return
    cluster: OsmemCluster = request.getfixturevalue("osmem_cluster")
    proxy = HttpProxy(cluster.url, elasticsearch=name == "elasticsearch")
    url = elasticsearch_url(proxy) if name == "elasticsearch" else opensearch_url(proxy)
    # no client-level retries: the suite sees every fault it injects
    options = {"max_retries": 0, "request_timeout_s": 10}
    try:
        yield Backend(name, url, tmp_path, options, True, True, proxy, _engine_settings(cluster))
    finally:
        proxy.close()
