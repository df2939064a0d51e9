"""Choosing the target backend from the URL scheme.

``tantivy://dir`` (embedded), ``opensearch://host:port`` / ``opensearchs://`` (TLS),
``elasticsearch://host:port`` / ``elasticsearchs://`` (TLS). Backends are imported only when
named, so a pipeline on one never needs the others' clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.targets.base import Target

SCHEMES = ("tantivy", "opensearch", "opensearchs", "elasticsearch", "elasticsearchs")


def open_target(url: str, base_dir: Path, options: dict[str, Any] | None = None) -> Target:
    scheme = url.split(":", 1)[0].lower()
    if scheme == "tantivy":
        from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

        return TantivyTarget(TantivyTargetConfig.from_url(url, base_dir, options or {}))
    if scheme in ("opensearch", "opensearchs"):
        from sparkindex.targets.opensearch import OpenSearchTarget, OpenSearchTargetConfig

        return OpenSearchTarget(OpenSearchTargetConfig.from_url(url, base_dir, options or {}))
    if scheme in ("elasticsearch", "elasticsearchs"):
        from sparkindex.targets.elasticsearch import ElasticsearchTarget, ElasticsearchTargetConfig

        return ElasticsearchTarget(ElasticsearchTargetConfig.from_url(url, base_dir, options or {}))
    raise ConfigError(
        f"target.url: unsupported target {scheme!r} in {redact_url(url)!r} (supported: {', '.join(SCHEMES)})"
    )
