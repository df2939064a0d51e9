"""osmem-server fixtures: an in-memory OpenSearch-compatible server, a TEST DOUBLE.

Results that depend on it are results against osmem, not against OpenSearch or Elasticsearch:
it applies writes at once (refresh is a no-op), has one node, and never answers 429 (the fault
proxy in :mod:`tests.support.http_proxy` injects those).

Use from any test package by importing the fixtures into its conftest::

    from tests.support.osmem import *  # noqa: F403  (osmem, osmem_cluster, es_shim, fault_proxy)

* ``osmem`` (session): one server process, started as
  ``osmem-server -addr 127.0.0.1:PORT -no-stdin-watch -parent-pid PID``. Skipped, with the
  reason, only if its binary cannot run on this machine.
* ``osmem_cluster`` (function): a fresh, empty clone of it on its own port (isolated per test);
  ``.url`` (http://), ``.opensearch_url`` (opensearch://host:port).
* ``fault_proxy`` / ``es_shim`` (function): an :class:`HttpProxy` in front of ``osmem_cluster``;
  ``es_shim`` plays Elasticsearch 9 (``tests.support.personalities``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest

from tests.support.http_proxy import HttpProxy
from tests.support.personalities import BY_KEY

STARTUP_TIMEOUT_S = 30.0


@dataclass
class OsmemProcess:
    url: str
    process: subprocess.Popen[bytes]

    def request(self, method: str, path: str, body: object = None, base: str | None = None) -> object:
        data = None if body is None else orjson.dumps(body)
        req = urllib.request.Request(
            (base or self.url) + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
        return orjson.loads(text) if text else None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@dataclass
class OsmemCluster:
    """One isolated cluster (a clone of the session's server), reached over plain HTTP."""

    url: str
    clone_id: str
    server: OsmemProcess

    @property
    def host_port(self) -> str:
        return self.url.removeprefix("http://")

    @property
    def opensearch_url(self) -> str:
        return f"opensearch://{self.host_port}"

    def request(self, method: str, path: str, body: object = None) -> object:
        return self.server.request(method, path, body, base=self.url)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_osmem() -> OsmemProcess:
    """Start osmem-server and wait for its ready line (it prints its URL once it listens)."""
    from osmem_server import OsmemError, resolve_binary

    try:
        binary = resolve_binary()
    except OsmemError as exc:
        pytest.skip(f"osmem-server cannot run here: {exc}")
    args = [binary, "-addr", f"127.0.0.1:{_free_port()}", "-no-stdin-watch", "-parent-pid", str(os.getpid())]
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    except OSError as exc:  # not executable on this platform
        pytest.skip(f"osmem-server cannot run here ({binary}): {exc}")
    ready: dict[str, object] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(msg, dict) and "url" in msg:
                ready.update(msg)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(STARTUP_TIMEOUT_S)
    if not ready:
        proc.kill()
        raise RuntimeError(f"osmem-server did not report ready within {STARTUP_TIMEOUT_S}s (exit code {proc.poll()})")
    return OsmemProcess(str(ready["url"]), proc)


@pytest.fixture(scope="session")
def osmem() -> Iterator[OsmemProcess]:
    server = start_osmem()
    yield server
    server.stop()


@contextlib.contextmanager
def cloned_cluster(osmem: OsmemProcess) -> Iterator[OsmemCluster]:
    """A fresh, empty clone of the server for as long as the block runs (any fixture scope)."""
    clone = osmem.request("POST", "/_osmem/clones")
    assert isinstance(clone, dict)
    cluster = OsmemCluster(str(clone["url"]), str(clone["id"]), osmem)
    try:
        yield cluster
    finally:
        osmem.request("DELETE", f"/_osmem/clones/{cluster.clone_id}")


@pytest.fixture
def osmem_cluster(osmem: OsmemProcess) -> Iterator[OsmemCluster]:
    with cloned_cluster(osmem) as cluster:
        yield cluster


@pytest.fixture
def fault_proxy(osmem_cluster: OsmemCluster) -> Iterator[HttpProxy]:
    proxy = HttpProxy(osmem_cluster.url)
    yield proxy
    proxy.close()


@pytest.fixture
def es_shim(osmem_cluster: OsmemCluster) -> Iterator[HttpProxy]:
    """Elasticsearch 9's personality (with fault injection) in front of a fresh cluster."""
    proxy = HttpProxy(osmem_cluster.url, elasticsearch=True)
    yield proxy
    proxy.close()


def elasticsearch_url(proxy: HttpProxy) -> str:
    return f"elasticsearch://{proxy.host_port}"


def opensearch_url(proxy: HttpProxy) -> str:
    return f"opensearch://{proxy.host_port}"


def engine_url(engine: str, request: pytest.FixtureRequest, cluster: OsmemCluster) -> str:
    """The target URL of *engine* on the test's osmem cluster: "opensearch" (osmem as itself),
    "elasticsearch" (Elasticsearch 9's personality) or a personality's key ("es-8.19")."""
    if engine == "opensearch":
        return cluster.opensearch_url
    if engine == "elasticsearch":
        return elasticsearch_url(request.getfixturevalue("es_shim"))
    persona = BY_KEY[engine]
    proxy = HttpProxy(cluster.url, personality=persona)
    request.addfinalizer(proxy.close)
    return f"{persona.scheme}://{proxy.host_port}"


__all__ = [
    "OsmemCluster",
    "OsmemProcess",
    "cloned_cluster",
    "elasticsearch_url",
    "engine_url",
    "es_shim",
    "fault_proxy",
    "opensearch_url",
    "osmem",
    "osmem_cluster",
    "start_osmem",
]
