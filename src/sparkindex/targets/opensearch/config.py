"""OpenSearch's settings: the shared ones (see :mod:`sparkindex.targets.search_engine.config`).

OpenSearch has no API keys; basic auth comes from the URL or ``username``/``password`` options.
"""

from __future__ import annotations

from typing import ClassVar

from sparkindex.targets.search_engine.config import SearchEngineConfig


class OpenSearchTargetConfig(SearchEngineConfig):
    SCHEMES: ClassVar[tuple[str, str]] = ("opensearch", "opensearchs")
