"""The target: unreachable, then a server (osmem-server, a TEST DOUBLE of OpenSearch) that answers
at a supported version and lets the credentials create an index and an alias."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkindex.preflight.target import _version
from tests.e2e.shop import make_shop
from tests.preflight.helpers import checks_of, closed_port, statuses
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import OsmemCluster, elasticsearch_url


def _shop(directory: Path, target: str) -> Path:
    make_shop(directory, products=20, partition_size=10)
    config = directory / "pipeline.yaml"
    text = config.read_text(encoding="utf-8").replace("url: tantivy://index", f"url: {target}")
    config.write_text(text, encoding="utf-8")
    return config


def reach_url(text: str) -> str:
    return next(line.split("url: ", 1)[1] for line in text.splitlines() if "opensearch://" in line)


def test_unreachable_target_then_a_server(tmp_path: Path, osmem_cluster: OsmemCluster) -> None:
    config = _shop(tmp_path, f"opensearch://127.0.0.1:{closed_port()}")
    checks = checks_of(config)
    reach = checks["target.reachable"]
    assert reach.status == "FAIL" and reach.transient, reach
    assert reach.fix is not None and "target.url" in reach.fix
    assert statuses(checks, "target.") == {"target.reachable": "FAIL"}, "nothing else can be asked of it"

    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(reach_url(text), osmem_cluster.opensearch_url), encoding="utf-8")  # the fix
    checks = checks_of(config)
    assert statuses(checks, "target.") == {
        "target.reachable": "OK",
        "target.version": "OK",
        "target.privileges": "OK",
    }, checks
    assert "OpenSearch 3." in checks["target.version"].detail
    assert osmem_cluster.request("GET", "/_aliases") == {}, "the throwaway index is gone"


def test_elasticsearch_url_through_the_shim(tmp_path: Path, es_shim: HttpProxy) -> None:
    checks = checks_of(_shop(tmp_path, elasticsearch_url(es_shim)))
    assert statuses(checks, "target.") == {
        "target.reachable": "OK",
        "target.version": "OK",
        "target.privileges": "OK",
    }, checks


@pytest.mark.parametrize(
    ("distribution", "number", "status"),
    [
        ("opensearch", "2.11.1", "FAIL"),
        ("opensearch", "2.12.0", "OK"),
        (None, "7.9.3", "FAIL"),
        (None, "7.10.2", "OK"),
        (None, "8.15.0", "OK"),
        (None, "", "WARN"),
    ],
)
def test_version_minimums(distribution: str | None, number: str, status: str) -> None:
    """What the servers answer at ``GET /`` (Elasticsearch sends no distribution)."""
    version = {"number": number, **({"distribution": distribution} if distribution else {})}
    assert _version({"version": version}, "http://server:9200").status == status
