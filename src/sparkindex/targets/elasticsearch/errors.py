"""elastic-transport's exceptions, translated into what the shared code acts on. An error status
is not an exception there: :class:`~.client.ElasticsearchTransport` turns it into an
:class:`HttpFailure` itself."""

from __future__ import annotations

import elastic_transport

from sparkindex.config.secrets import redact_url
from sparkindex.errors import PermanentError, SparkIndexError
from sparkindex.targets.search_engine.errors import connection_error


def translate(exc: elastic_transport.TransportError, what: str, where: str) -> SparkIndexError:
    """No answer at all: a connection error (TLS ones permanent); anything else permanent."""
    if isinstance(exc, elastic_transport.ConnectionError | elastic_transport.ConnectionTimeout):  # TlsError too
        tls, timeout = isinstance(exc, elastic_transport.TlsError), isinstance(exc, elastic_transport.ConnectionTimeout)
        return connection_error(what, where, str(exc.message), tls=tls, timeout=timeout)
    return PermanentError(f"{what} on {where}: {type(exc).__name__}: {redact_url(str(exc))}")
