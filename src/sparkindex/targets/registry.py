"""Choosing the target backend from the URL scheme.

``tantivy://dir`` (embedded), ``opensearch://host:port`` / ``opensearchs://`` (TLS),
``elasticsearch://host:port`` / ``elasticsearchs://`` (TLS). Backends are imported only when
named, so a pipeline on one never needs the others' clients.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, cast

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError
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


def _backend(url: str) -> tuple[Any, str, str]:
    scheme = url.split(":", 1)[0].lower()
    if scheme not in _BACKENDS:
        raise ConfigError(
            f"target.url: unsupported target {scheme!r} in {redact_url(url)!r} (supported: {', '.join(SCHEMES)})"
        )
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
