"""opensearch-py's exceptions, translated into what the shared code acts on."""

from __future__ import annotations

import opensearchpy

from sparkindex.config.secrets import redact_url
from sparkindex.errors import PermanentError, SparkIndexError
from sparkindex.targets.search_engine.errors import HttpFailure, connection_error, failure_from_body


def translate(exc: opensearchpy.OpenSearchException, what: str, where: str) -> HttpFailure | SparkIndexError:
    """An error status becomes :class:`HttpFailure`; no answer at all, a connection error."""
    if isinstance(exc, opensearchpy.ConnectionError):  # SSLError and ConnectionTimeout included
        tls, timeout = isinstance(exc, opensearchpy.SSLError), isinstance(exc, opensearchpy.ConnectionTimeout)
        return connection_error(what, where, str(exc.error), tls=tls, timeout=timeout)
    if isinstance(exc, opensearchpy.TransportError) and isinstance(exc.status_code, int):
        return failure_from_body(exc.status_code, exc.info if isinstance(exc.info, dict) else {"error": exc.error})
    return PermanentError(f"{what} on {where}: {type(exc).__name__}: {redact_url(str(exc))}")
