"""Elasticsearch through elastic-transport, the HTTP layer of the official clients, with the media
types of the server's major.

Why not the ``elasticsearch`` client itself: it rewrites every JSON media type to
``compatible-with=<its own major>``, and a server accepts only its major and the one before
(Elasticsearch 8 refuses a 9 client with 400 ``media_type_header_exception``). The client's docs
tie a client major to a server major and publish older ones as ``elasticsearch8`` and
``elasticsearch7``, but ``elasticsearch8`` needs elastic-transport < 9 and ``elasticsearch`` 9
needs >= 9.4, so one environment cannot hold both. sparkindex only ever used the client's
``perform_request`` with bodies it encodes itself; the transport underneath (connection pools,
TLS, node failover, gzip, retries) is the same code and carries no version rule, so we use it
directly and send each major the media types it documents (:mod:`..search_engine.engine`).
"""

from __future__ import annotations

import base64
import logging
from typing import Any
from urllib.parse import quote

import elastic_transport
from elastic_transport import NodeConfig, OrjsonSerializer

from sparkindex.errors import ConfigError
from sparkindex.targets.elasticsearch.config import ElasticsearchTargetConfig
from sparkindex.targets.elasticsearch.errors import translate
from sparkindex.targets.search_engine.api import Request, Transport
from sparkindex.targets.search_engine.engine import PLAIN, EngineInfo, MediaTypes
from sparkindex.targets.search_engine.errors import failure_from_body
from sparkindex.targets.search_engine.quiet_logs import quiet_client_failures
from sparkindex.targets.search_engine.target import SearchEngineTarget

log = logging.getLogger(__name__)


class _VersionedJson(OrjsonSerializer):
    mimetype = "application/vnd.elasticsearch+json"


_SERIALIZERS = {
    "application/json": OrjsonSerializer(),
    "application/vnd.elasticsearch+json": _VersionedJson(),
    # bodies arrive encoded: the text serializer passes bytes through
    "application/x-ndjson": elastic_transport.TextSerializer(),
    "application/vnd.elasticsearch+x-ndjson": elastic_transport.TextSerializer(),
    "text/plain": elastic_transport.TextSerializer(),
}


def _auth_headers(c: ElasticsearchTargetConfig) -> dict[str, str]:
    if c.api_key is not None:
        return {"authorization": f"ApiKey {c.api_key.get_secret_value()}"}
    if c.username is not None or c.password is not None:
        pair = f"{c.username or ''}:{c.password.get_secret_value() if c.password else ''}"
        return {"authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
    return {}


class ElasticsearchTransport(Transport):
    def __init__(self, config: ElasticsearchTargetConfig) -> None:
        c = config
        if not c.verify_certs:
            log.warning(
                "target %s: TLS certificates are not verified (target.options.verify_certs: false)", c.describe()
            )
        headers = {"user-agent": "sparkindex", **_auth_headers(c)}
        nodes = []
        for host in c.hosts:
            tls: dict[str, Any] = {}
            if c.tls:
                tls = {"verify_certs": c.verify_certs, "ssl_show_warn": c.verify_certs}
                for key in ("ca_certs", "client_cert", "client_key"):
                    if getattr(c, key) is not None:
                        tls[key] = str(getattr(c, key))
            nodes.append(
                NodeConfig(
                    "https" if c.tls else "http",
                    host.host,
                    host.port,
                    path_prefix=c.url_prefix,
                    headers=headers,
                    connections_per_node=c.connections_per_host,
                    request_timeout=c.request_timeout_s,
                    http_compress=c.http_compress,
                    **tls,
                )
            )
        quiet_client_failures()
        try:
            self.transport = elastic_transport.Transport(
                nodes,
                serializers=_SERIALIZERS,
                max_retries=c.max_retries,
                retry_on_status=(),
                retry_on_timeout=False,
                meta_header=False,
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"target.options: {exc}") from None
        self.where = c.describe()
        self.request_timeout_s, self.max_retries = c.request_timeout_s, c.max_retries
        #: plain JSON until the server's major is known
        self.media: MediaTypes = PLAIN

    def _send(self, request: Request, media: MediaTypes) -> tuple[Any, dict[str, str]]:
        r = request
        target = r.path
        if r.params:
            target += "?" + "&".join(f"{k}={_quote(v)}" for k, v in r.params.items())
        try:
            response = self.transport.perform_request(
                r.method,
                target,
                body=r.body,
                headers=media.headers(r.ndjson),
                request_timeout=r.timeout_s if r.timeout_s is not None else self.request_timeout_s,
                max_retries=0 if r.single_try else self.max_retries,
            )
        except elastic_transport.TransportError as exc:
            raise translate(exc, str(r), self.where) from None
        meta, body = response.meta, response.body
        if not 200 <= meta.status < 300:
            raise failure_from_body(meta.status, body if isinstance(body, dict) else {"error": str(body)[:500]})
        return body, {k.lower(): v for k, v in meta.headers.items()}

    def perform(self, request: Request) -> Any:
        return self._send(request, self.media)[0]

    def root(self, timeout_s: float) -> tuple[Any, dict[str, str]]:
        return self._send(Request("GET", "/", timeout_s=timeout_s), PLAIN)

    def speak(self, engine: EngineInfo) -> None:
        self.media = engine.media_types

    def close(self) -> None:
        self.transport.close()


def _quote(value: str) -> str:
    return quote(value, safe=",*")


class ElasticsearchTarget(SearchEngineTarget[ElasticsearchTargetConfig]):
    ENGINE = "Elasticsearch"
    DISTRIBUTION = "elasticsearch"

    def _connect(self) -> Transport:
        return ElasticsearchTransport(self.config)
