"""OpenSearch as a target (opensearch-py): ``opensearch://host:9200``, ``opensearchs://`` for TLS."""

from sparkindex.targets.opensearch.client import OpenSearchTarget
from sparkindex.targets.opensearch.config import OpenSearchTargetConfig

__all__ = ["OpenSearchTarget", "OpenSearchTargetConfig"]
