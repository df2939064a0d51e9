"""Each engine version is talked to in what it accepts, and a server sparkindex cannot serve is
refused when the target connects, naming what it found and what is needed.

The servers are osmem-server (a TEST DOUBLE) behind the proxy playing one version's personality
(:mod:`tests.support.personalities`): its root, product header, media-type rule, refused fields
and, for Amazon OpenSearch Service, SigV4 signatures checked with botocore's own signer.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkindex.errors import ConfigError, LockLost, PermanentError
from sparkindex.targets.registry import open_target
from sparkindex.targets.search_engine import aliases
from sparkindex.targets.search_engine.engine import identify
from sparkindex.targets.search_engine.target import SearchEngineTarget
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import OsmemCluster
from tests.support.personalities import AWS, ES_7, ES_8, ES_9, OS_1, OS_2, OS_3, Personality
from tests.targets.backends import personality_options

MAPPING = {"properties": {"n": {"type": "long"}}}


@pytest.fixture
def play(osmem_cluster: OsmemCluster) -> Iterator[object]:
    proxies: list[HttpProxy] = []

    def start(persona: Personality) -> HttpProxy:
        proxy = HttpProxy(osmem_cluster.url, personality=persona)
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.close()


def _open(
    proxy: HttpProxy, persona: Personality, monkeypatch: pytest.MonkeyPatch, **options: object
) -> SearchEngineTarget:  # type: ignore[type-arg]
    opts = {"max_retries": 0, "request_timeout_s": 10, **personality_options(persona, monkeypatch), **options}
    target = open_target(f"{persona.scheme}://{proxy.host_port}", Path("."), opts)
    assert isinstance(target, SearchEngineTarget)
    return target


@pytest.mark.parametrize(
    ("persona", "wire"),
    [
        (ES_7, "plain JSON"),
        (ES_8, "compatible-with=8"),
        (ES_9, "compatible-with=9"),
        (OS_1, "plain JSON"),
        (OS_2, "plain JSON"),
        (OS_3, "plain JSON"),
        (AWS, "plain JSON"),
    ],
    ids=lambda v: v.key if isinstance(v, Personality) else v,
)
def test_each_version_is_identified_and_spoken_to_in_its_media_types(
    persona: Personality, wire: str, play: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = play(persona)  # type: ignore[operator]
    target = _open(proxy, persona, monkeypatch)
    try:
        engine = target.engine
        assert (engine.distribution, engine.number) == (persona.distribution, persona.number)
        assert wire in engine.describe_wire()
        index = target.create_version("shop", MAPPING)
        target.swap("shop", index, None)
        assert target.alias_target("shop") == index
    finally:
        target.close()
    kinds = {m for m in proxy.media_types if m}
    if wire == "plain JSON":
        assert all("vnd.elasticsearch" not in m for m in kinds), kinds
    else:
        assert any(wire in m for m in kinds), kinds


@pytest.mark.parametrize("persona", [ES_7, ES_8], ids=lambda p: p.key)
def test_without_negotiation_an_older_elasticsearch_refuses_a_9_client(
    persona: Personality, play: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a client pinned to major 9 meets (here: the version declared, so nothing is read at
    connect): the server's own 400, and nothing created."""
    proxy = play(persona)  # type: ignore[operator]
    target = _open(proxy, persona, monkeypatch, engine_version="9.1")
    try:
        with pytest.raises(PermanentError) as refused:
            target.create_version("shop", MAPPING)
    finally:
        target.close()
    message = str(refused.value)
    print(f"{persona.key} without negotiation: {message}")  # shown with -rP: the server's own words
    assert "media_type_header_exception" in message
    assert f"must be either version {persona.major} or {persona.major - 1}, but found 9" in message


def _moved_after_the_read(monkeypatch: pytest.MonkeyPatch, cluster: OsmemCluster, actions: list[object]) -> None:
    """Another job or a person changes the alias between the swap's read of it and its request:
    the race the compare-and-swap exists for (the next read of the alias runs *actions* first)."""
    read = aliases.alias_indexes
    done: list[bool] = []

    def racing(api: object, alias: str) -> dict[str, bool]:
        found = read(api, alias)  # type: ignore[arg-type]
        if not done:
            done.append(True)
            cluster.request("POST", "/_aliases", {"actions": actions})
        return found

    monkeypatch.setattr(aliases, "alias_indexes", racing)


def test_an_opensearch_before_2_12_is_never_sent_must_exist_and_its_swap_still_compares(
    play: object, monkeypatch: pytest.MonkeyPatch, osmem_cluster: OsmemCluster
) -> None:
    proxy = play(OS_1)  # type: ignore[operator]
    target = _open(proxy, OS_1, monkeypatch)
    try:
        first, second, third, fourth = (target.create_version("shop", MAPPING) for _ in range(4))
        target.swap("shop", first, None)
        # another job moves the alias to its version (always the write index) after our read
        _moved_after_the_read(
            monkeypatch,
            osmem_cluster,
            [
                {"remove": {"index": first, "alias": "shop"}},
                {"add": {"index": third, "alias": "shop", "is_write_index": True}},
            ],
        )
        with pytest.raises(LockLost, match="more than one write index"):
            target.swap("shop", second, first)
        assert aliases.alias_indexes(target.api, "shop") == {third: True}, "the refused swap changed nothing"
        monkeypatch.undo()
        target.swap("shop", second, third)
        # a person adds an index to the alias by hand (no write index) after our read: our
        # request goes through; the read-back sees it and undoes ours in one request
        _moved_after_the_read(monkeypatch, osmem_cluster, [{"add": {"index": fourth, "alias": "shop"}}])
        with pytest.raises(LockLost, match="changed meanwhile"):
            target.swap("shop", first, second)
        assert aliases.alias_indexes(target.api, "shop") == {second: True, fourth: False}, "as it was, plus theirs"
    finally:
        target.close()
    assert not any(b"must_exist" in body for body in proxy.alias_bodies)

    # declared as 2.12 (must_exist known), the same server refuses the field, as OpenSearch 1.3 does
    target = _open(proxy, OS_1, monkeypatch, engine_version="2.12")
    try:
        with pytest.raises(PermanentError, match=r"unknown field \[must_exist\]"):
            target.swap("shop", first, second)
    finally:
        target.close()


def test_opensearch_in_compatibility_mode_is_opensearch_without_must_exist() -> None:
    root = {"version": {"number": "7.10.2"}, "tagline": "The OpenSearch Project: https://opensearch.org/"}
    engine = identify(root, {}, "http://x:9200")
    assert engine.distribution == "opensearch" and not engine.alias_must_exist


def test_elasticsearch_7_10_gets_the_swap_without_must_exist() -> None:
    """7.10 shipped must_exist unparsed: 7.11 is the first to take it."""
    es710 = {"version": {"number": "7.10.2", "build_flavor": "default"}, "tagline": "You Know, for Search"}
    assert not identify(es710, {}, "http://x:9200").alias_must_exist
    es711 = {"version": {"number": "7.11.0"}, "tagline": "You Know, for Search"}
    assert identify(es711, {}, "http://x:9200").alias_must_exist


def test_a_server_that_claims_a_recent_elasticsearch_without_its_product_header_is_refused(
    play: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = play(ES_8)  # type: ignore[operator]
    proxy.strip_product_header = True
    target = _open(proxy, ES_8, monkeypatch)
    try:
        with pytest.raises(ConfigError, match=r"but is not Elasticsearch: every Elasticsearch since 7\.14"):
            target.count("x")
    finally:
        target.close()


@pytest.mark.parametrize(
    ("persona", "needed"),
    [
        (Personality("es-7.9", "elasticsearch", "7.9.3"), "Elasticsearch 7.10 or later"),
        (Personality("es-6.8", "elasticsearch", "6.8.23"), "Elasticsearch 7.10 or later"),
    ],
    ids=lambda v: v.key if isinstance(v, Personality) else "",
)
def test_a_version_too_old_is_refused_at_connect(
    persona: Personality, needed: str, play: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = play(persona)  # type: ignore[operator]
    target = _open(proxy, persona, monkeypatch)
    try:
        with pytest.raises(ConfigError, match=rf"is Elasticsearch {persona.number}; sparkindex needs {needed}"):
            target.create_version("shop", MAPPING)
    finally:
        target.close()
    assert [r for r in proxy.requests if r[1] != "/"] == [], "nothing but the root was asked"


def test_the_other_engine_is_refused_with_the_scheme_to_use(play: object, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = play(ES_8)  # type: ignore[operator]
    target = open_target(f"opensearch://{proxy.host_port}", Path("."), {"max_retries": 0})
    try:
        with pytest.raises(ConfigError, match=r"is Elasticsearch 8\.19\.3, not OpenSearch: use the elasticsearch://"):
            target.count("anything")
    finally:
        target.close()


def test_a_server_that_is_neither_is_refused() -> None:
    with pytest.raises(ConfigError, match="not OpenSearch or Elasticsearch"):
        identify({"name": "solr", "version": {"number": "9.6.1"}, "tagline": "Apache Solr"}, {}, "http://x:9200")
    with pytest.raises(ConfigError, match="reports no version"):
        identify({"ok": True}, {}, "http://x:9200")


def test_sigv4_signatures_are_checked_by_botocore(play: object, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = play(AWS)  # type: ignore[operator]
    target = _open(proxy, AWS, monkeypatch)
    try:
        assert target.engine.number == AWS.number  # every request signed, the root's too
    finally:
        target.close()
    assert AWS.sigv4 is not None
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret")
    wrong = open_target(
        f"opensearch://{proxy.host_port}", Path("."), {"max_retries": 0, "aws_region": AWS.sigv4.region}
    )
    unsigned = open_target(f"opensearch://{proxy.host_port}", Path("."), {"max_retries": 0})
    other_region = open_target(
        f"opensearch://{proxy.host_port}", Path("."), {"max_retries": 0, "aws_region": "us-east-1"}
    )
    for bad, why in ((wrong, "signature mismatch"), (unsigned, "no SigV4"), (other_region, "signed for us-east-1")):
        try:
            with pytest.raises(PermanentError, match=f"403.*{why}"):
                bad.count("x")
        finally:
            bad.close()


def test_serverless_is_refused_before_anything_is_sent(play: object, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = play(AWS)  # type: ignore[operator]
    options = {**personality_options(AWS, monkeypatch), "aws_service": "aoss"}
    target = open_target(f"opensearch://{proxy.host_port}", Path("."), options)
    try:
        with pytest.raises(
            ConfigError, match="Amazon OpenSearch Serverless, which sparkindex cannot serve: it has no scroll"
        ):
            target.count("x")
    finally:
        target.close()
    assert proxy.requests == []


def test_elastic_cloud_id_names_the_host_over_tls() -> None:
    encoded = base64.b64encode(b"eu-west-1.aws.found.io:9243$abc123$kib456").decode()
    target = open_target("elasticsearchs://", Path("."), {"cloud_id": f"shop:{encoded}", "api_key": "aWQ6a2V5"})
    try:
        assert target.config.host_urls() == ["https://abc123.eu-west-1.aws.found.io:9243"]  # type: ignore[attr-defined]
        assert "aWQ6a2V5" not in repr(target.config)  # type: ignore[attr-defined]
    finally:
        target.close()
    with pytest.raises(ConfigError, match="cloud_id names the host"):
        open_target("elasticsearch://es1:9200", Path("."), {"cloud_id": f"shop:{encoded}"})
    with pytest.raises(ConfigError, match="names no host"):
        open_target("elasticsearchs://", Path("."), {})
