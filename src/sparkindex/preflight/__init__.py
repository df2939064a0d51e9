"""``sparkindex check``: a preflight of everything a run needs, one line per check (issue 18).

One module per area (``source``, ``changes_postgres``, ``changes_mysql``, ``polling``, ``store``,
``target``, ``spark``), the result model (``model``) and the order they run in (``runner``).
``reindex`` and ``sync`` call :func:`guard` first, so they fail with the same lines.
"""

from sparkindex.preflight.model import Check, Options, exit_code, report
from sparkindex.preflight.runner import guard, run_checks

__all__ = ["Check", "Options", "exit_code", "guard", "report", "run_checks"]
