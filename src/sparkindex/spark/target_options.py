"""A target's options given to the ``sparkindex`` DataFrame reader and writer as Spark options.

``target.<key>`` passes the target's own option (``target.request_timeout_s``). A secret must not
travel as a Spark option, where the UI, the event logs and plan descriptions show it, so
``target.<key>_env`` names an environment variable instead, read when the target is opened (on
the executor): ``.option("target.password_env", "OPENSEARCH_PASSWORD")``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkindex.errors import ConfigError
from sparkindex.resources import open_target_url
from sparkindex.targets.target import Target

PREFIX = "target."
ENV_SUFFIX = "_env"


def target_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``target.*`` Spark options, prefix removed (``_env`` references still unresolved)."""
    return {k[len(PREFIX) :]: v for k, v in options.items() if k.startswith(PREFIX)}


def resolve_env(options: Mapping[str, str], where: str) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for key, value in options.items():
        if key.endswith(ENV_SUFFIX):
            if value not in os.environ:
                raise ConfigError(f"{where}: option '{PREFIX}{key}': environment variable {value!r} is not set")
            resolved[key[: -len(ENV_SUFFIX)]] = os.environ[value]
        else:
            resolved[key] = value
    return resolved


def open_target_with(url: str, base_dir: Path, options: Mapping[str, str], where: str) -> Target:
    """The target at *url* with its ``target.*`` options (environment references resolved here);
    the caller closes it (``with open_target_with(...) as target:``)."""
    return open_target_url(url, base_dir, resolve_env(options, where))
