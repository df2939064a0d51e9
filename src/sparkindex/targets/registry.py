"""Choosing the target backend from the URL scheme.

``tantivy://dir`` (embedded), ``opensearch://host:port`` / ``opensearchs://`` (TLS),
``elasticsearch://host:port`` / ``elasticsearchs://`` (TLS). Backends are imported only when
named, so a pipeline on one never needs the others' clients, nor their extras installed.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, cast

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
from sparkindex.extras import require
from sparkindex.targets.target import Target

#: scheme -> (module, backend class, its config class)
_BACKENDS: dict[str, tuple[str, str, str]] = {
    "tantivy": ("sparkindex.targets.tantivy", "TantivyTarget", "TantivyTargetConfig"),
    "opensearch": ("sparkindex.targets.opensearch", "OpenSearchTarget", "OpenSearchTargetConfig"),
    "opensearchs": ("sparkindex.targets.opensearch", "OpenSearchTarget", "OpenSearchTargetConfig"),
    "elasticsearch": ("sparkindex.targets.elasticsearch", "ElasticsearchTarget", "ElasticsearchTargetConfig"),
    "elasticsearchs": ("sparkindex.targets.elasticsearch", "ElasticsearchTarget", "ElasticsearchTargetConfig"),
}
SCHEMES = tuple(_BACKENDS)

#: scheme -> (the extra with the backend's client, the engine's name); Tantivy is in the core
_EXTRAS: dict[str, tuple[str, str]] = {
    "opensearch": ("opensearch", "OpenSearch"),
    "opensearchs": ("opensearch", "OpenSearch"),
    "elasticsearch": ("elasticsearch", "Elasticsearch"),
    "elasticsearchs": ("elasticsearch", "Elasticsearch"),
}


def require_client(url: str, key: str = "target.url", role: str = "target") -> None:
    """The client of the backend at *url* imported, or a :class:`~sparkindex.extras.MissingExtra`
    naming *key*, the *role* the engine plays there (``target``, ``index to rebuild``) and the
    extra to install. Nothing for Tantivy or an unknown scheme."""
    scheme = url.split(":", 1)[0].lower()
    if scheme in _EXTRAS:
        extra, name = _EXTRAS[scheme]
        require(extra, f"{key}: the {name} {role} ({scheme}://)")


def _backend(url: str) -> tuple[Any, str, str]:
    scheme = url.split(":", 1)[0].lower()
    if scheme not in _BACKENDS:
        raise ConfigError(
            f"target.url: unsupported target {scheme!r} in {redact_url(url)!r} (supported: {', '.join(SCHEMES)})"
        )
    require_client(url)
    module, cls, config = _BACKENDS[scheme]
    return importlib.import_module(module), cls, config


def target_class(url: str) -> type[Target]:
    """The backend class for *url*, imported but not opened: what it can hold (``supports_join``)
    is known without connecting to it or creating its directory."""
    module, cls, _ = _backend(url)
    return cast(type[Target], getattr(module, cls))


def open_target(url: str, base_dir: Path, options: dict[str, Any] | None = None) -> Target:
    module, cls, config = _backend(url)
    return cast(Target, getattr(module, cls)(getattr(module, config).from_url(url, base_dir, options or {})))
