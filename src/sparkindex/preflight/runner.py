"""Running the checks in order (source, change capture, store, target, Spark), and the guard
that ``reindex`` and ``sync`` call before they start.

A check that cannot even run (a server that vanished half-way, a bug in a probe) becomes a FAIL
line marked transient rather than a traceback: ``check`` shows it, and a run's guard leaves it to
the run, which meets the same server and reports it its own way. Only failures a person must fix
(a setting, a privilege, the configuration) stop a run, with the very lines ``check`` prints.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError, TransientError
from sparkindex.preflight.model import Check, Options, Scope, fail, first_line
from sparkindex.preflight.pooler import check_pooling
from sparkindex.preflight.replica import REPLICA_LAG, check_replica
from sparkindex.preflight.source import SourceFindings, check_source
from sparkindex.preflight.spark import check_spark
from sparkindex.preflight.store import check_store
from sparkindex.preflight.target import check_target


def run_checks(pipeline: Pipeline, options: Options | None = None) -> list[Check]:
    from sparkindex.documents.planning import selected_aliases

    options = options or Options()
    aliases = selected_aliases(pipeline, options.aliases)
    found = SourceFindings()

    def source() -> list[Check]:
        checks, findings = check_source(pipeline, aliases, options)
        found.source, found.plans, found.answering = findings.source, findings.plans, findings.answering
        return checks

    checks = _area("source", source)
    try:
        if found.sql and found.answering and wants_changes(pipeline, options.scope):
            checks += _area("changes", lambda: _changes(pipeline, found, aliases, options))
        checks += _area("replica", lambda: check_replica(pipeline, options))
        checks += _area("store", lambda: check_store(pipeline, options))
        checks += _area("pooler", lambda: check_pooling(pipeline, options))
        checks += _area("target", lambda: check_target(pipeline, aliases, options))
        checks += _area("spark", lambda: check_spark(pipeline, options))
    finally:
        _close(found)
    return checks


def wants_changes(pipeline: Pipeline, scope: Scope) -> bool:
    """A sync always captures changes, and a run that only builds documents never does;
    otherwise only a pipeline that asks for it (a ``sync:`` section or ``changes:``, what makes a
    reindex catch up) has its prerequisites checked."""
    from sparkindex.capture.catch_up import wants_catch_up

    if scope == "documents":
        return False
    return scope == "sync" or wants_catch_up(pipeline)


def _changes(pipeline: Pipeline, found: SourceFindings, aliases: Sequence[str], options: Options) -> list[Check]:
    from sparkindex.capture.fanout import FanOut
    from sparkindex.capture.session import watched_tables
    from sparkindex.capture.source import LOG_SOURCES, POLLING_SOURCE, source_kind

    source = found.source
    assert source is not None
    try:
        kind = source_kind(pipeline, source)
    except ConfigError as exc:
        return [fail("changes.source", str(exc), "use sync.source: polling with indexes[].changes")]
    if kind == POLLING_SOURCE:
        from sparkindex.preflight.polling import check_polling

        return check_polling(pipeline, source, aliases)
    tables = watched_tables([FanOut(found.plans[a], source) for a in aliases if a in found.plans])
    if kind == LOG_SOURCES["postgresql"]:
        from sparkindex.preflight.changes_postgres import check_postgres_changes

        return check_postgres_changes(pipeline, source, tables, options)
    from sparkindex.preflight.changes_mysql import check_mysql_changes

    return check_mysql_changes(pipeline, source, tables, options)


def _area(area: str, run: Callable[[], list[Check]]) -> list[Check]:
    """One area's checks; an error that escaped them is one line, never a traceback."""
    try:
        return run()
    except ConfigError as exc:
        return [fail(area, str(exc), "correct the configuration named above")]
    except (TransientError, sa.exc.DBAPIError, OSError) as exc:
        return [fail(area, first_line(exc), "make sure the servers answer, then check again", transient=True)]
    except Exception as exc:  # noqa: BLE001 - a probe's own failure must not hide the other checks
        detail = f"the check could not run: {type(exc).__name__}: {first_line(exc)}"
        return [fail(area, detail, "run `sparkindex check` for the other checks", transient=True)]


def _close(found: SourceFindings) -> None:
    if found.source is not None:
        found.source.close()  # an index source closes the target it reads through


#: checks a run does not stop on, though ``check`` fails them: each is judged on evidence the run
#: may not need (a resumed job's catch-up slot exists already; a slot count against another
#: consumer group), or a managed server grants it another way (RDS's rds_replication role has
#: no rolreplication flag), or a version below the tested one may still do what this run needs;
#: a run that truly cannot proceed fails at that step with its own error; a read replica's lag a
#: run waits out itself, refusing it after source.max_replica_lag_s
ADVISORY_IN_A_RUN = frozenset({"postgres.replication_slots", "postgres.replication_privilege", REPLICA_LAG})


def guard(
    pipeline: Pipeline,
    scope: Scope,
    aliases: Sequence[str] | None = None,
    stream: TextIO | None = None,
    *,
    adopt: bool = False,
    session_master: str | None = None,
) -> None:
    """What ``reindex`` and ``sync`` call first: the checks their run needs, without the probes
    that write (the run makes those writes itself a moment later). Warnings are printed and the
    run goes on; failures a person must fix are printed as ``check`` prints them, and the run
    stops with exit 2 (:class:`ConfigError`) before it touches anything."""
    options = Options(scope=scope, aliases=aliases, probe_writes=False, adopt=adopt, session_master=session_master)
    checks = run_checks(pipeline, options)
    out = stream or sys.stderr
    stopping = [c for c in checks if c.blocking and c.name not in ADVISORY_IN_A_RUN]
    for check in checks:
        if check in stopping or check.status == "WARN":
            out.write(check.line() + "\n")
        elif check.status == "FAIL":  # the run meets it itself: retried if transient, else its own error
            out.write(check.line() + "  (the run goes on and meets this itself)\n")
    out.flush()
    if stopping:
        raise ConfigError(
            f"{pipeline.origin}: {len(stopping)} preflight check(s) failed (listed above); "
            f"`sparkindex check -c {pipeline.origin}` runs every check"
        )
