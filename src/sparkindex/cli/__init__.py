"""The ``sparkindex`` command: arguments in, lines for a person and JSON for a script out.

The work lives in the layers below (``jobs``, ``preflight``, ``scaffold``, ``server``). A command module parses,
calls one of them and renders the result, so the CLI, the server and the tests run the same code. Messages go to
stderr; ``--json`` prints one object on stdout's last line. Exit codes are the same everywhere: 0 done, 1 done with
errors or drift, 2 bad usage or config, 3 failed or stopped.

* ``app``: the Typer app and the small commands (reindex, demo, status, stop, verify, search, gc, dlq); it wires in
  the command modules below.
* ``init_cmd``: ``sparkindex init``. The pipeline goes to ``-o``, what was chosen to stderr; an existing file is
  never overwritten without ``--force``.
* ``check_cmd``: ``sparkindex check``. One OK/WARN/FAIL line per check; exit 0, 1 (warnings only) or 2.
* ``explain_cmd``: ``sparkindex explain``. Renders :mod:`sparkindex.jobs.explain` and
  :mod:`sparkindex.jobs.explain_partitions`; a row that cannot be indexed exits 1.
* ``sync``: ``sparkindex sync``. A signal ends it cleanly (batch finished or left unacknowledged, lock and holds
  released); a second signal exits at once with 3.
* ``verify_cmd``: the body of ``verify [--repair]`` and its output; exit 1 when drift is left.
* ``dlq_cmd``: ``dlq list`` and ``dlq redrive``; exit 1 when some letters still fail.
* ``gc_cmd``: the body of ``gc --older-than`` and its output.
* ``status_cmd``: the latest job of the aliases and their last verify. No job yet is not an error.
* ``serve``: ``sparkindex serve`` on 127.0.0.1:8484.
* ``render``: Rich output: a progress bar per entity, errors on stderr with passwords hidden, JSON on stdout. User
  text is never read as Rich markup.
* ``bars``: progress bars for verify and repair (key ranges) and re-drive (dead letters), on stderr.
"""
