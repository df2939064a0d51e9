"""``sparkindex check``: a preflight of everything a run needs, one line per check.

``reindex`` and ``sync`` call :func:`guard` first, so they fail with the same lines. The checks call the run's own
validation, so they pass exactly what a run accepts. A server that does not answer is transient and left to the
run; a setting or privilege a person must fix stops it (exit 2).

* ``model``: ``Check`` (OK/WARN/FAIL, detail, fix; passwords hidden), the ``Options`` every check reads, the report
  and the exit code.
* ``runner``: the checks in order, and the ``guard``. A check that crashes is a transient FAIL, not a traceback.
  Slot counts, the REPLICATION flag and the target version only warn in a run (``ADVISORY_IN_A_RUN``).
* ``source``: reachable, every table readable, ids unique and NOT NULL, each index resolvable with the reindex's
  own plan. Nothing is written.
* ``replica``: ``source.read_url`` answers, replicates from ``source.url``, and its lag now against the bound.
* ``changes_postgres``: logical decoding, wal2json (probed with a temporary slot), free slots, REPLICATION, replica
  identities that make deletes findable.
* ``changes_mysql``: binlog settings judged by the run's own table, one GTID domain, replica grants probed as the
  run probes them, binlog retention.
* ``polling``: each polled column exists, is monotone in type and is indexed (an unindexed one only warns).
* ``store``: reachable, writable, at a schema level this version can use, never SQLite behind a cluster. Nothing
  is left behind.
* ``target``: a supported engine version and the privileges a reindex needs (probed on a throwaway index), or a
  writable Tantivy directory with room.
* ``spark``: the master answers (a TCP connect) and ``java -version`` says 17 or 21.
"""

from sparkindex.preflight.model import Check, Options, exit_code, report
from sparkindex.preflight.runner import guard, run_checks

__all__ = ["Check", "Options", "exit_code", "guard", "report", "run_checks"]
