"""One line for a Spark error a person reads (a log line, a summary).

What an error *means* never comes from this text: tasks return the errors they can classify as
data (:mod:`sparkindex.spark.task_errors`). But an error a Python worker let escape reaches the
driver as the JVM's message with the worker's whole traceback inside, and that is not a line.
"""

from __future__ import annotations

import itertools
import re

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
