"""Errors a Spark task returns as data, so the driver gets their class back, not a traceback's text.

An exception a Python worker lets escape reaches the driver as the text of a JVM exception, with
the worker's traceback inside; deciding from that text whether to retry means matching class
names in a string. A task instead catches what it can classify and sends it in its result rows
(:func:`sparkindex.errors.to_wire`); the driver raises the same class again
(:func:`raise_returned`). A transient error, and what a task cannot classify, still escape:
Spark retries the task, and then the caller decides (the sync retries its batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sqlalchemy.exc import ProgrammingError

from sparkindex.config.secrets import error_line
from sparkindex.errors import PermanentError, SparkIndexError, TransientError, from_wire, to_wire


def classify(exc: BaseException) -> SparkIndexError | None:
    """The error a task reports for *exc*, or None to let it escape. A transient error escapes:
    Spark retries the task, and the driver retries what still fails. SQL a server refuses as
    written (a column or table gone, a privilege revoked) fails the same way on every retry."""
    if isinstance(exc, TransientError):
        return None
    if isinstance(exc, SparkIndexError):
        return exc
    if isinstance(exc, ProgrammingError):
        return PermanentError(f"a query was refused: {error_line(exc)}")
    return None


def encode(exc: SparkIndexError) -> str:
    return orjson.dumps(to_wire(exc)).decode()


def raise_returned(rows: Iterable[Mapping[str, Any] | Any]) -> None:
    """Raise the first error a task returned in *rows* (each with an ``error`` column)."""
    for row in rows:
        text = row["error"]
        if text:
            raise from_wire(orjson.loads(text))
