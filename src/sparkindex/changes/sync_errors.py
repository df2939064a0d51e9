"""What a failed batch means: errors cross the Spark boundary as text.

An apply task raises sparkindex's own errors (or a driver's) inside a Python worker; the driver
sees them only as the text of a Spark exception. So the permanent ones (a config error, a lost
lock, a gap, SQL that will fail again: a column or table gone, a privilege revoked) are known by
their class names here, in one place, and everything else is retried with backoff.
"""

from __future__ import annotations

import itertools
import re

from sparkindex.errors import PermanentError, SparkIndexError

_TRACEBACK = "Traceback (most recent call last):"
#: a Python exception's own line ("module.Class: message"), as a traceback ends with it
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")


def brief(exc: BaseException) -> str:
    """One line for a log or a summary. An error from a Python worker reaches the driver as the
    JVM's message with the worker's whole traceback inside: its line is the JVM's head and the
    last Python exception raised (the one the worker let escape), never "Traceback ..."."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    lines = text.splitlines()
    head = lines[0]
    if _TRACEBACK in head:
        head = head.split(_TRACEBACK, 1)[0].rstrip(" :")
        cause = _last_python_exception(lines[1:])
        if cause:
            head = f"{head}: {cause}"
    return head[:500]


def _last_python_exception(lines: list[str]) -> str | None:
    """The last exception line of the Python tracebacks in *lines*, before the JVM's own trace.
    An exception line follows the indented source line of its innermost frame."""
    found = None
    for before, line in itertools.pairwise(lines):
        if line.startswith(("JVM stacktrace", "\tat ")):
            break
        if before.startswith("    ") and _EXCEPTION_LINE.match(line):
            found = line.strip()
    return found


def is_permanent(exc: BaseException) -> bool:
    """Whether a failed batch would fail again. Errors cross the Spark boundary as text, so the
    apply tasks' permanent errors are known by their class names."""
    text = str(exc)
    return any(name in text for name in PERMANENT_NAMES)


#: permanent error classes an apply task may raise, as they show in Spark's error text: ours,
#: and SQL errors that repeat themselves (a column or table gone, a privilege revoked)
PERMANENT_NAMES = (
    "ConfigError",
    "UsageError",
    "LockLost",
    "PermanentError",
    "LogGap",
    "ProgrammingError",
    "UndefinedColumn",
    "UndefinedTable",
    "InsufficientPrivilege",
)


def as_error(exc: BaseException) -> SparkIndexError:
    if isinstance(exc, SparkIndexError):
        return exc
    return PermanentError(f"applying changes failed: {brief(exc)}")
