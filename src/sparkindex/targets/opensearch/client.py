"""OpenSearch through opensearch-py: its client built from the config, reduced to one call.

Every OpenSearch major (1, 2, 3) takes plain JSON, so nothing changes with the version but the
features :mod:`..search_engine.engine` decides. With ``aws_region`` the client signs each request
with SigV4 (opensearch-py's ``Urllib3AWSV4SignerAuth`` over botocore's credential chain; botocore
is the ``aws`` extra).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import opensearchpy
import orjson

from sparkindex.errors import ConfigError
from sparkindex.extras import require
from sparkindex.targets.opensearch.config import OpenSearchTargetConfig
from sparkindex.targets.opensearch.errors import translate
from sparkindex.targets.search_engine.api import Request, Transport
from sparkindex.targets.search_engine.engine import PLAIN, EngineInfo
from sparkindex.targets.search_engine.quiet_logs import quiet_client_failures
from sparkindex.targets.search_engine.target import SearchEngineTarget

log = logging.getLogger(__name__)


class OrjsonSerializer(opensearchpy.JSONSerializer):
    """Responses (bulk answers above all) decoded by orjson; bodies arrive already encoded."""

    def loads(self, s: str) -> Any:
        return orjson.loads(s)

    def dumps(self, data: Any) -> Any:
        if isinstance(data, str | bytes):
            return data
        return orjson.dumps(data)


class OpenSearchTransport(Transport):
    def __init__(self, config: OpenSearchTargetConfig) -> None:
        c = config
        if not c.verify_certs:
            log.warning(
                "target %s: TLS certificates are not verified (target.options.verify_certs: false)", c.describe()
            )
        auth: Any = None
        if c.aws_region is not None:
            auth = _aws_signer(c)
        elif c.username is not None or c.password is not None:
            auth = (c.username or "", c.password.get_secret_value() if c.password else "")
        quiet_client_failures()
        self.client = self._client(c, auth, c.max_retries)
        #: for requests that must not be resent (opensearch-py sets retries per client only);
        #: made on first use
        self._single_try: opensearchpy.OpenSearch | None = None
        self._single_try_lock = threading.Lock()  # the bulk threads of a worker share the transport
        self._auth, self._config = auth, c
        self.where = c.describe()

    @staticmethod
    def _client(c: OpenSearchTargetConfig, auth: Any, max_retries: int) -> opensearchpy.OpenSearch:
        try:
            return opensearchpy.OpenSearch(
                hosts=c.host_urls(),
                http_auth=auth,
                use_ssl=c.tls,
                verify_certs=c.verify_certs,
                ssl_show_warn=c.verify_certs,
                ca_certs=str(c.ca_certs) if c.ca_certs else None,
                client_cert=str(c.client_cert) if c.client_cert else None,
                client_key=str(c.client_key) if c.client_key else None,
                timeout=c.request_timeout_s,
                http_compress=c.http_compress,
                max_retries=max_retries,
                retry_on_status=(),
                retry_on_timeout=False,
                pool_maxsize=c.connections_per_host,
                serializer=OrjsonSerializer(),
            )
        except opensearchpy.ImproperlyConfigured as exc:
            raise ConfigError(f"target.options: {exc}") from None

    def perform(self, request: Request) -> Any:
        r = request
        client = self.client
        if r.single_try and self._config.max_retries > 0:
            with self._single_try_lock:
                if self._single_try is None:
                    self._single_try = self._client(self._config, self._auth, 0)
                client = self._single_try
        try:
            return client.transport.perform_request(
                r.method, r.path, params=r.params, body=r.body, headers=PLAIN.headers(r.ndjson), timeout=r.timeout_s
            )
        except opensearchpy.OpenSearchException as exc:
            raise translate(exc, str(r), self.where) from None

    def root(self, timeout_s: float) -> tuple[Any, dict[str, str]]:
        # opensearch-py hands back bodies only; OpenSearch is told apart by its body alone
        return self.perform(Request("GET", "/", timeout_s=timeout_s)), {}

    def speak(self, engine: EngineInfo) -> None:
        """Every OpenSearch takes plain JSON."""

    def close(self) -> None:
        self.client.close()
        if self._single_try is not None:
            self._single_try.close()


def _aws_signer(c: OpenSearchTargetConfig) -> Any:
    """opensearch-py's SigV4 signer over the standard AWS credential chain."""
    require("aws", "target.options.aws_region: SigV4 signing", ["botocore.session"])
    import botocore.exceptions
    import botocore.session

    session = botocore.session.Session(profile=c.aws_profile)
    try:
        credentials = session.get_credentials()
    except botocore.exceptions.BotoCoreError as exc:  # a profile that does not exist, for one
        raise ConfigError(f"target.options.aws_profile: {exc}") from None
    if credentials is None:
        raise ConfigError(
            "target.options.aws_region: no AWS credentials found (environment, ~/.aws files, container or "
            "instance role); set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
        )
    return opensearchpy.Urllib3AWSV4SignerAuth(credentials, c.aws_region, c.aws_service)


class OpenSearchTarget(SearchEngineTarget[OpenSearchTargetConfig]):
    ENGINE = "OpenSearch"
    DISTRIBUTION = "opensearch"

    def _connect(self) -> Transport:
        return OpenSearchTransport(self.config)


__all__ = ["OpenSearchTarget", "OpenSearchTransport"]
