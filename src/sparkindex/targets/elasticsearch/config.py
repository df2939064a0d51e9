"""Elasticsearch's settings: the shared ones plus an API key (``target.options.api_key``, the
base64 ``id:key`` form Elasticsearch hands out; use ``${VAR}`` to keep it out of the file)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import SecretStr, model_validator

from sparkindex.targets.search_engine.config import SearchEngineConfig


class ElasticsearchTargetConfig(SearchEngineConfig):
    SCHEMES: ClassVar[tuple[str, str]] = ("elasticsearch", "elasticsearchs")

    api_key: SecretStr | None = None

    @model_validator(mode="after")
    def _one_kind_of_auth(self) -> ElasticsearchTargetConfig:
        if self.api_key is not None and (self.username is not None or self.password is not None):
            raise ValueError("api_key and a username/password exclude each other; give one")
        return self
