"""What a failed batch means: errors cross the Spark boundary as text.

An apply task raises sparkindex's own errors (or a driver's) inside a Python worker; the driver
sees them only as the text of a Spark exception. So the permanent ones (a config error, a lost
lock, a gap, SQL that will fail again: a column or table gone, a privilege revoked) are known by
their class names here, in one place, and everything else is retried with backoff.
"""

from __future__ import annotations

from sparkindex.errors import PermanentError, SparkIndexError


def brief(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:500] if str(exc).strip() else type(exc).__name__


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
