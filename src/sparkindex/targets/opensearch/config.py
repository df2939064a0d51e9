"""OpenSearch's settings: the shared ones (see :mod:`sparkindex.targets.search_engine.config`)
plus request signing for Amazon OpenSearch Service.

OpenSearch has no API keys; basic auth comes from the URL or ``username``/``password`` options.
``aws_region`` switches to AWS Signature Version 4: every request is signed with credentials from
the standard AWS chain (environment, shared config and credentials files, container or instance
role), for the service ``aws_service`` (``es`` for a managed domain, ``aoss`` for Serverless).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sparkindex.targets.search_engine.config import SearchEngineConfig


class OpenSearchTargetConfig(SearchEngineConfig):
    SCHEMES: ClassVar[tuple[str, str]] = ("opensearch", "opensearchs")

    #: sign requests with SigV4 for this AWS region (Amazon OpenSearch Service)
    aws_region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$")
    #: ``es``: a managed domain; ``aoss``: OpenSearch Serverless
    aws_service: Literal["es", "aoss"] = "es"
    #: a named profile of the AWS config files instead of the default chain
    aws_profile: str | None = None

    @model_validator(mode="after")
    def _signing_excludes_basic_auth(self) -> OpenSearchTargetConfig:
        if self.aws_region is not None and (self.username is not None or self.password is not None):
            raise ValueError("aws_region (SigV4 signing) and a username/password exclude each other; give one")
        if self.aws_region is None and ("aws_service" in self.model_fields_set or self.aws_profile is not None):
            raise ValueError("aws_service and aws_profile need aws_region (SigV4 signing)")
        return self

    @property
    def serverless(self) -> bool:
        return self.aws_region is not None and self.aws_service == "aoss"
