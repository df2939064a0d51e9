"""The target: unreachable, then a server (osmem-server, a TEST DOUBLE of OpenSearch) that answers
at a supported version and lets the credentials create an index and an alias."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.shop import make_shop
from tests.preflight.helpers import checks_of, closed_port, statuses
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import OsmemCluster
from tests.support.personalities import ALL, Personality
from tests.targets.backends import personality_options


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
        "target.alias.products": "OK",
        "target.privileges": "OK",
    }, checks
    assert "OpenSearch 3." in checks["target.version"].detail
    assert osmem_cluster.request("GET", "/_aliases") == {}, "the throwaway index is gone"


@pytest.mark.parametrize("persona", ALL, ids=lambda p: p.key)
def test_check_names_the_engine_and_version_of_each_personality(
    persona: Personality, tmp_path: Path, osmem_cluster: OsmemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = HttpProxy(osmem_cluster.url, personality=persona)
    try:
        config = _shop(tmp_path, f"{persona.scheme}://{proxy.host_port}")
        options = personality_options(persona, monkeypatch)
        if options:
            text = config.read_text(encoding="utf-8")
            shown = ", ".join(f"{k}: {v}" for k, v in options.items())
            config.write_text(
                text.replace(
                    f"url: {persona.scheme}://{proxy.host_port}",
                    f"url: {persona.scheme}://{proxy.host_port}\n  options: {{{shown}}}",
                ),
                encoding="utf-8",
            )
        checks = checks_of(config)
    finally:
        proxy.close()
    assert statuses(checks, "target.") == {
        "target.reachable": "OK",
        "target.version": "OK",
        "target.alias.products": "OK",
        "target.privileges": "OK",
    }, checks
    name = "Elasticsearch" if persona.is_elasticsearch else "OpenSearch"
    assert f"{name} {persona.number}" in checks["target.version"].detail


@pytest.mark.parametrize(
    ("persona", "needed"),
    [
        (Personality("os-0.9", "opensearch", "0.9.0"), "OpenSearch 1.0 or later"),
        (Personality("es-7.9", "elasticsearch", "7.9.3"), "Elasticsearch 7.10 or later"),
    ],
    ids=lambda v: v.key if isinstance(v, Personality) else "",
)
def test_check_refuses_a_version_too_old(
    persona: Personality, needed: str, tmp_path: Path, osmem_cluster: OsmemCluster
) -> None:
    proxy = HttpProxy(osmem_cluster.url, personality=persona)
    try:
        checks = checks_of(_shop(tmp_path, f"{persona.scheme}://{proxy.host_port}"))
    finally:
        proxy.close()
    version = checks["target.version"]
    assert version.status == "FAIL" and not version.transient, version
    assert persona.number in version.detail and needed in version.detail, version


def test_check_fails_an_alias_whose_name_is_an_index(tmp_path: Path, osmem_cluster: OsmemCluster) -> None:
    osmem_cluster.request("PUT", "/products", {})
    checks = checks_of(_shop(tmp_path, osmem_cluster.opensearch_url))
    taken = checks["target.alias.products"]
    assert taken.status == "FAIL" and "reindex --adopt" in taken.detail and taken.fix is not None, taken
