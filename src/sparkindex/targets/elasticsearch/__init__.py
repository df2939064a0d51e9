"""Elasticsearch as a target (the official ``elasticsearch`` 9 client): ``elasticsearch://host:9200``,
``elasticsearchs://`` for TLS, API keys or basic auth."""

from sparkindex.targets.elasticsearch.client import ElasticsearchTarget
from sparkindex.targets.elasticsearch.config import ElasticsearchTargetConfig

__all__ = ["ElasticsearchTarget", "ElasticsearchTargetConfig"]
