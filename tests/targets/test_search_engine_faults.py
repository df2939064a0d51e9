"""Whole-request failures of the search-engine targets, classified through the fault proxy.

The server behind the proxy is osmem-server, a TEST DOUBLE of OpenSearch; the faults (429s,
503s, 401s, 413s, dropped connections, requests that never get an answer, TLS) are the proxy's.
Both real clients are exercised: opensearch-py, and the elasticsearch 9 client through the shim.
"""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkindex.errors import ConfigError, LeaseExpired, PermanentError, TransientError
from sparkindex.retry import Backoff
from sparkindex.targets.base import BulkItem
from sparkindex.targets.registry import open_target
from sparkindex.targets.target import Target
from sparkindex.targets.write_deadline import writes_until
from sparkindex.worker.bulk import bulk_with_retries
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import OsmemCluster

MAPPING: dict[str, Any] = {"properties": {"n": {"type": "long"}}}
SECRET = "pw-Never-Shown-42"


@dataclass
class Engine:
    name: str
    proxy: HttpProxy
    cluster: OsmemCluster

    @property
    def scheme(self) -> str:
        return self.name

    def url(self, host_port: str | None = None, tls: bool = False, userinfo: str = "") -> str:
        return f"{self.scheme}{'s' if tls else ''}://{userinfo}{host_port or self.proxy.host_port}"

    def open(self, host_port: str | None = None, **options: Any) -> Target:
        return open_target(self.url(host_port), Path("."), {"max_retries": 0, **options})


@pytest.fixture(params=["opensearch", "elasticsearch"])
def engine(request: pytest.FixtureRequest, osmem_cluster: OsmemCluster) -> Iterator[Engine]:
    proxy = HttpProxy(osmem_cluster.url, elasticsearch=request.param == "elasticsearch")
    yield Engine(request.param, proxy, osmem_cluster)
    proxy.close()


def items(*ids: int) -> list[BulkItem]:
    return [BulkItem(str(i), b'{"n":%d}' % i, f"h{i}", sort_key=f"{i:04x}") for i in ids]


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_overload_and_gateway_errors_are_transient(engine: Engine, status: int) -> None:
    target = engine.open()
    index = target.create_version("f", MAPPING)
    engine.proxy.fail_next(status, path="/_bulk")
    with pytest.raises(TransientError, match=str(status)):
        target.bulk(index, items(1))
    assert [r.ok for r in target.bulk(index, items(1))] == [True]  # the next attempt goes through


def test_bulk_retries_a_whole_request_then_lands(engine: Engine) -> None:
    target = engine.open()
    index = target.create_version("f", MAPPING)
    engine.proxy.fail_next(429, count=2, path="/_bulk")
    delays: list[float] = []
    outcome = bulk_with_retries(target, index, items(1, 2, 3), 5, Backoff(0.5, 4.0), sleep=delays.append)
    assert outcome.success == 3 and len(delays) == 2 and all(0 <= d <= 4.0 for d in delays)
    target.finish_version(index)
    assert target.count(index) == 3


def test_dropped_connections_are_transient_and_the_client_fails_over(engine: Engine) -> None:
    target = engine.open()
    index = target.create_version("f", MAPPING)
    engine.proxy.drop_next(path="/_bulk")
    with pytest.raises(TransientError, match="cannot reach"):
        target.bulk(index, items(1))
    retrying = engine.open(max_retries=2)
    engine.proxy.drop_next(path="/_bulk")
    assert [r.ok for r in retrying.bulk(index, items(2))] == [True]  # the client's own retry


def test_a_dead_host_among_several_is_skipped(engine: Engine) -> None:
    dead = HttpProxy(engine.cluster.url)
    dead_host = dead.host_port
    dead.close()  # nothing listens there now
    target = open_target(engine.url(f"{dead_host},{engine.proxy.host_port}"), Path("."), {"max_retries": 2})
    index = target.create_version("f", MAPPING)
    assert [r.ok for r in target.bulk(index, items(1, 2))] == [True, True]


def test_a_request_without_answer_times_out_as_transient(engine: Engine) -> None:
    target = engine.open(request_timeout_s=0.5)
    index = target.create_version("f", MAPPING)
    engine.proxy.hold_next(path="/_bulk")
    with pytest.raises(TransientError, match="did not answer in time"):
        target.bulk(index, items(1))


def test_bad_credentials_are_permanent_and_never_shown(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    target = open_target(engine.url(userinfo=f"indexer:{SECRET}@"), Path("."), {"max_retries": 0})
    engine.proxy.fail_next(401, path="/shop")
    with pytest.raises(PermanentError, match="authentication failed") as caught:
        target.create_version("shop", MAPPING)
    assert SECRET not in str(caught.value) and SECRET not in caplog.text and SECRET not in repr(target)
    engine.proxy.fail_next(403, path="/shop")
    with pytest.raises(PermanentError, match="not allowed"):
        target.create_version("shop", MAPPING)


def test_other_client_errors_are_permanent(engine: Engine) -> None:
    target = engine.open()
    index = target.create_version("f", MAPPING)
    engine.proxy.fail_next(400, path="/_bulk")
    with pytest.raises(PermanentError, match="400"):
        target.bulk(index, items(1))


def test_a_bulk_too_large_for_the_server_is_halved(engine: Engine) -> None:
    target = engine.open()
    index = target.create_version("f", MAPPING)
    engine.proxy.fail_next(413, count=2, path="/_bulk")  # the whole, then its first half
    results = target.bulk(index, items(1, 2, 3, 4))
    assert [r.ok for r in results] == [True] * 4
    assert [b.ids for b in engine.proxy.bulks] == [["1"], ["2"], ["3", "4"]]


def test_bulks_split_by_count_and_bytes(engine: Engine) -> None:
    target = engine.open(max_bulk_docs=3)
    index = target.create_version("f", MAPPING)
    assert all(r.ok for r in target.bulk(index, items(*range(8))))
    assert [len(b.ids) for b in engine.proxy.bulks] == [3, 3, 2]


def test_gzip_request_bodies(engine: Engine) -> None:
    target = engine.open(http_compress=True)
    index = target.create_version("f", MAPPING)
    assert all(r.ok for r in target.bulk(index, items(1, 2)))
    assert [b.gzip for b in engine.proxy.bulks] == [True]
    target.finish_version(index)
    assert target.count(index) == 2


def test_a_mapping_the_server_refuses_is_a_config_error(engine: Engine) -> None:
    target = engine.open()
    with pytest.raises(ConfigError, match=r"index 'bad_v1' \(alias 'bad'\).*unknown setting"):
        target.create_version("bad", MAPPING, {"no_such_setting": 1})


def test_an_alias_name_taken_by_an_index_is_refused_before_the_build(engine: Engine) -> None:
    engine.cluster.request("PUT", "/products", {})
    with pytest.raises(ConfigError, match="an index of that very name exists"):
        engine.open().create_version("products", MAPPING)


def test_elasticsearch_target_refuses_a_server_that_is_not_elasticsearch(osmem_cluster: OsmemCluster) -> None:
    """osmem answers as OpenSearch: an elasticsearch:// URL naming it is a scheme mix-up."""
    proxy = HttpProxy(osmem_cluster.url)
    try:
        target = open_target(f"elasticsearch://{proxy.host_port}", Path("."), {})
        with pytest.raises(ConfigError, match=r"is OpenSearch \S+, not Elasticsearch: use the opensearch://"):
            target.create_version("x", MAPPING)
    finally:
        proxy.close()


# -- TLS -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl (the command) is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run(
        ["openssl", *request, "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.parametrize("scheme", ["opensearch", "elasticsearch"])
def test_tls_with_a_ca_bundle_or_verification_off(
    scheme: str, osmem_cluster: OsmemCluster, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    proxy = HttpProxy(osmem_cluster.url, elasticsearch=scheme == "elasticsearch", ssl_context=context)
    url = f"{scheme}s://{proxy.host_port}"
    try:
        trusted = open_target(url, cert.parent, {"ca_certs": cert.name, "max_retries": 0})
        assert trusted.create_version("tls", MAPPING) == "tls_v1"
        unverified = open_target(url, Path("."), {"verify_certs": False, "max_retries": 0})
        assert unverified.list_versions("tls") == ["tls_v1"]
        untrusted = open_target(url, Path("."), {"max_retries": 0})
        with pytest.raises(PermanentError, match=r"TLS .* failed.*ca_certs"):
            untrusted.list_versions("tls")
    finally:
        proxy.close()


def test_the_fence_index_is_created_strict_and_hidden(engine: Engine) -> None:
    target = engine.open()
    target.observe_fence("shop", 3)
    target.observe_fence("shop", 2)
    settings = engine.cluster.request("GET", "/.sparkindex-fences/_settings")
    mapping = engine.cluster.request("GET", "/.sparkindex-fences/_mapping")
    assert isinstance(settings, dict) and isinstance(mapping, dict)
    assert settings[".sparkindex-fences"]["settings"]["index"]["hidden"] == "true"
    assert mapping[".sparkindex-fences"]["mappings"]["dynamic"] == "strict"
    doc = engine.cluster.request("GET", "/.sparkindex-fences/_doc/shop")
    assert isinstance(doc, dict) and (doc["_version"], doc["_source"]["fence"]) == (3, 3)


def test_key_splits_of_a_large_index_come_from_a_sample(engine: Engine) -> None:
    target = engine.open(split_sample=100)  # 400 documents: more than the sample
    index = target.create_version("big", MAPPING)
    assert all(r.ok for r in target.bulk(index, items(*range(400))))
    cuts = target.key_splits(index, 4)
    assert len(cuts) == 3 and cuts == sorted(cuts)
    bounds = [None, *cuts, None]
    sizes = [len(list(target.scan_hashes(index, key_range=(bounds[i], bounds[i + 1])))) for i in range(4)]
    assert sum(sizes) == 400 and all(40 <= n <= 160 for n in sizes), sizes
    assert target.key_splits(index, 4) == cuts  # a fixed seed: the same index gives the same cuts


# -- a writer's deadline (a worker cut off from the store must stop writing, but its lease was
# checked once per bulk, one bulk is several requests, a request could wait its full timeout, and
# the client resent dropped ones; any of them could land after another worker had taken the
# partition over) ----------------------------------------------------------------------------
def _bulk_requests(engine: Engine) -> int:
    return sum(1 for _, path in engine.proxy.requests if "/_bulk" in path)


def test_no_chunk_of_a_bulk_is_sent_once_the_deadline_has_passed(engine: Engine) -> None:
    target = engine.open(max_bulk_docs=5)
    index = target.create_version("f", MAPPING)
    checks = 0

    def valid_until() -> float:
        """Valid for the first two chunks, over from the third (a lease that ran out mid-bulk)."""
        nonlocal checks
        checks += 1
        return time.monotonic() + (60 if checks <= 2 else -1)

    with pytest.raises(LeaseExpired, match="ran out"):
        bulk_with_retries(target, index, items(*range(20)), 3, Backoff(0.01, 0.01), valid_until=valid_until)
    assert [len(b.ids) for b in engine.proxy.bulks] == [5, 5]
    target.finish_version(index)
    assert target.count(index) == 10


def test_a_request_under_a_deadline_is_never_resent_by_the_client(engine: Engine) -> None:
    target = engine.open(max_retries=2)
    index = target.create_version("f", MAPPING)
    engine.proxy.drop_next(path="/_bulk")
    with writes_until(lambda: time.monotonic() + 60), pytest.raises(TransientError, match="cannot reach"):
        target.bulk(index, items(1))
    assert _bulk_requests(engine) == 1, engine.proxy.requests
    # the control: without a deadline the client's own retry resends it, and it lands
    engine.proxy.drop_next(path="/_bulk")
    assert [r.ok for r in target.bulk(index, items(2))] == [True]
    assert _bulk_requests(engine) == 3


def test_a_request_under_a_deadline_waits_for_no_answer_beyond_it(engine: Engine) -> None:
    """The proxy holds the request (it would answer 502 after 30 s); the configured timeout is
    60 s; the deadline, 1 s away, is what ends the wait."""
    target = engine.open(request_timeout_s=60)
    index = target.create_version("f", MAPPING)
    engine.proxy.hold_next(path="/_bulk")
    deadline = time.monotonic() + 1
    with writes_until(lambda: deadline), pytest.raises(TransientError, match="did not answer in time"):
        target.bulk(index, items(1))
