"""Elasticsearch through the official client: built from the config, reduced to one call."""

from __future__ import annotations

import logging
from typing import Any

import elastic_transport
import elasticsearch
from elasticsearch.serializer import OrjsonSerializer

from sparkindex.errors import ConfigError
from sparkindex.targets.elasticsearch.config import ElasticsearchTargetConfig
from sparkindex.targets.elasticsearch.errors import translate
from sparkindex.targets.search_engine.api import Request, Transport
from sparkindex.targets.search_engine.quiet_logs import quiet_client_failures
from sparkindex.targets.search_engine.target import SearchEngineTarget

log = logging.getLogger(__name__)


class ElasticsearchTransport(Transport):
    def __init__(self, config: ElasticsearchTargetConfig) -> None:
        c = config
        if not c.verify_certs:
            log.warning(
                "target %s: TLS certificates are not verified (target.options.verify_certs: false)", c.describe()
            )
        auth: dict[str, Any] = {}
        if c.api_key is not None:
            auth["api_key"] = c.api_key.get_secret_value()
        elif c.username is not None or c.password is not None:
            auth["basic_auth"] = (c.username or "", c.password.get_secret_value() if c.password else "")
        tls: dict[str, Any] = {}
        if c.tls:
            tls = {"verify_certs": c.verify_certs, "ssl_show_warn": c.verify_certs}
            for key in ("ca_certs", "client_cert", "client_key"):
                if getattr(c, key) is not None:
                    tls[key] = str(getattr(c, key))
        serializer = OrjsonSerializer()
        quiet_client_failures()
        try:
            self.client = elasticsearch.Elasticsearch(
                c.host_urls(),
                **auth,
                **tls,
                request_timeout=c.request_timeout_s,
                http_compress=c.http_compress,
                max_retries=c.max_retries,
                retry_on_status=(),
                retry_on_timeout=False,
                connections_per_node=c.connections_per_host,
                serializers={serializer.mimetype: serializer, "application/vnd.elasticsearch+json": serializer},
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"target.options: {exc}") from None
        self.where = c.describe()
        self.request_timeout_s, self.max_retries = c.request_timeout_s, c.max_retries

    def perform(self, request: Request) -> Any:
        r = request
        client = self.client
        if r.timeout_s is not None or r.single_try:
            client = client.options(
                request_timeout=r.timeout_s if r.timeout_s is not None else self.request_timeout_s,
                max_retries=0 if r.single_try else self.max_retries,
            )
        try:
            # the client turns the JSON types into its compatibility types (vnd.elasticsearch+json)
            response = client.perform_request(r.method, r.path, params=r.params, headers=r.headers, body=r.body)
        except (elasticsearch.ApiError, elastic_transport.TransportError) as exc:
            raise translate(exc, str(r), self.where) from None
        return response.body

    def close(self) -> None:
        self.client.close()


class ElasticsearchTarget(SearchEngineTarget[ElasticsearchTargetConfig]):
    ENGINE = "Elasticsearch"

    def _connect(self) -> Transport:
        return ElasticsearchTransport(self.config)
