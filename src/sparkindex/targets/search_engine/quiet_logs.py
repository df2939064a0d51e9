"""One line, not a stack, for each request the search engine clients log as failed.

opensearch-py and elastic-transport log every failed request at WARNING with its traceback. Our
code retries the request or turns the failure into an error of its own that says what happened
and what to do; fifty lines of urllib3 frames per dropped connection bury that (a chaos trial
with a flaky target printed hundreds). The line and the exception's own message stay.
"""

from __future__ import annotations

import logging

#: the loggers the clients' transports log failures on. A logger's filter sees only the records
#: made on it, not its children's: elastic_transport logs a retry on ``.transport``, with the stack.
CLIENT_LOGGERS = (
    "opensearch",
    "elastic_transport",
    "elastic_transport.transport",
    "elastic_transport.node",
    "elastic_transport.node_pool",
)


class OneLineFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno < logging.ERROR:
            exc = record.exc_info[1]
            if exc is not None:
                detail = f"{type(exc).__name__}: {exc}".replace("%", "%%")
                record.msg = f"{record.msg} ({detail})"
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_client_failures() -> None:
    """Install the filter on the clients' loggers (once per process, whoever calls first)."""
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineFailures) for f in logger.filters):
            logger.addFilter(OneLineFailures())
