"""What OpenSearch and Elasticsearch share: one base target over their HTTP APIs, with hooks.

Each engine's folder (``targets/opensearch``, ``targets/elasticsearch``) supplies its config class
(URL schemes, engine-only options) and its client, reduced to a :class:`~.api.Transport`.
"""

from sparkindex.targets.search_engine.api import EngineApi, Transport
from sparkindex.targets.search_engine.config import SearchEngineConfig
from sparkindex.targets.search_engine.errors import HttpFailure
from sparkindex.targets.search_engine.target import SearchEngineTarget

__all__ = ["EngineApi", "HttpFailure", "SearchEngineConfig", "SearchEngineTarget", "Transport"]
