"""Elasticsearch's settings: the shared ones plus an API key (``target.options.api_key``, the
base64 ``id:key`` form Elasticsearch hands out; use ``${VAR}`` to keep it out of the file) and
Elastic Cloud's ``cloud_id``, which names the host instead of ``target.url``
(``target: {url: "elasticsearchs://", options: {cloud_id: ..., api_key: ...}}``)."""

from __future__ import annotations

from typing import Any, ClassVar

from elastic_transport.client_utils import parse_cloud_id
from pydantic import SecretStr, model_validator

from sparkindex.targets.search_engine.config import Host, SearchEngineConfig


class ElasticsearchTargetConfig(SearchEngineConfig):
    SCHEMES: ClassVar[tuple[str, str]] = ("elasticsearch", "elasticsearchs")

    api_key: SecretStr | None = None
    #: Elastic Cloud's deployment id (``name:base64``): the host and port, always over TLS
    cloud_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _cloud_host(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("cloud_id"):
            return data
        if data.get("hosts"):
            raise ValueError("cloud_id names the host: leave the host out of target.url (elasticsearchs://)")
        try:
            address = parse_cloud_id(str(data["cloud_id"])).es_address
        except ValueError:
            address = None
        if address is None:
            raise ValueError("cloud_id is not an Elastic Cloud id (name:base64 of host$es$kibana)")
        if data.get("tls") is False:
            raise ValueError("Elastic Cloud is reached over TLS only (drop tls: false)")
        return {**data, "hosts": (Host(address[0], address[1]),), "tls": True}

    @model_validator(mode="after")
    def _one_kind_of_auth(self) -> ElasticsearchTargetConfig:
        if self.api_key is not None and (self.username is not None or self.password is not None):
            raise ValueError("api_key and a username/password exclude each other; give one")
        return self
