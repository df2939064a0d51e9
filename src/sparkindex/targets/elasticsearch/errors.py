"""The ``elasticsearch`` client's exceptions (elastic-transport's underneath), translated into
what the shared code acts on."""

from __future__ import annotations

import elastic_transport
import elasticsearch

from sparkindex.config.secrets import redact_url
from sparkindex.errors import PermanentError, SparkIndexError
from sparkindex.targets.search_engine.errors import HttpFailure, connection_error, failure_from_body


def translate(exc: Exception, what: str, where: str) -> HttpFailure | SparkIndexError:
    """An error status becomes :class:`HttpFailure`; no answer at all, a connection error; a
    server that is not Elasticsearch is permanent."""
    if isinstance(exc, elasticsearch.UnsupportedProductError):
        return PermanentError(
            f"{what}: {where} is not Elasticsearch (no 'X-Elastic-Product: Elasticsearch' header); "
            "use the opensearch:// scheme for OpenSearch"
        )
    if isinstance(exc, elasticsearch.ApiError):
        return failure_from_body(exc.meta.status, exc.body if isinstance(exc.body, dict) else {"error": exc.message})
    if isinstance(exc, elastic_transport.ConnectionError | elastic_transport.ConnectionTimeout):  # TlsError too
        tls, timeout = isinstance(exc, elastic_transport.TlsError), isinstance(exc, elastic_transport.ConnectionTimeout)
        return connection_error(what, where, str(exc.message), tls=tls, timeout=timeout)
    return PermanentError(f"{what} on {where}: {type(exc).__name__}: {redact_url(str(exc))}")
