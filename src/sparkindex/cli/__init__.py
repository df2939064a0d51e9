"""The ``sparkindex`` command: arguments in, lines for a person and JSON for a script out.

The work is :mod:`sparkindex.api`'s: a command module parses its arguments, makes one call of the
front door and renders the frozen result, so the CLI, the server, a scheduler and the tests run
the same code. What the CLI still does itself: its arguments and their messages (``--older-than``,
``--on-gap``, ``-o``), the Rich bars (:class:`~sparkindex.cli.bars.RichBars`, one implementation
of :class:`sparkindex.api.Progress`), the process's own tuning before a reindex (garbage
collector, allocator) and the sync's signal handlers, writing ``init``'s file, and exit codes.
Messages go to stderr; ``--json`` prints one object on stdout's last line (the result's
``to_dict()`` or ``report``). Exit codes are the same everywhere: 0 done, 1 done with errors or
drift, 2 bad usage or config, 3 failed or stopped.

* ``app``: the Typer app and the small commands (reindex, demo, status, stop, verify, search, gc, dlq); it wires in
  the command modules below.
* ``init_cmd``: ``sparkindex init``. The pipeline goes to ``-o``, what was chosen to stderr; an existing file is
  never overwritten without ``--force``.
* ``check_cmd``: ``sparkindex check``. One OK/WARN/FAIL line per check; exit 0, 1 (warnings only) or 2.
* ``explain_cmd``: ``sparkindex explain``. Renders :func:`sparkindex.api.explain`'s result; a row that cannot be
  indexed exits 1.
* ``sync``: ``sparkindex sync``. A signal ends it cleanly (batch finished or left unacknowledged, lock and holds
  released) through an :class:`~sparkindex.api.StopToken`; a second signal exits at once with 3.
* ``verify_cmd``: the lines of ``verify [--repair]``; exit 1 when drift is left.
* ``dlq_cmd``: the lines of ``dlq list`` and ``dlq redrive``; exit 1 when some letters still fail.
* ``gc_cmd``: ``--older-than`` read, and the lines of ``gc``.
* ``status_cmd``: the latest job of the aliases and their last verify. No job yet is not an error.
* ``serve``: ``sparkindex serve`` on 127.0.0.1:8484.
* ``render``: messages and errors on stderr with passwords hidden, JSON on stdout. User text is never read as Rich
  markup.
* ``bars``: the Rich progress bars, on stderr.
"""
