"""The read replica (``source.read_url``): it answers, it replicates from ``source.url``, and
how far behind it is now.

A full reindex, verify and repair wait for the replica before reading it (and refuse it after
``source.max_replica_lag_s``), so a lag past the bound here is a failure ``check`` reports with
its fix, and one a run meets itself (:data:`~sparkindex.preflight.runner.ADVISORY_IN_A_RUN`): the
replica may have caught up by the time the run asks.
"""

from __future__ import annotations

import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.preflight.model import Check, Options, fail, first_line, ok, warn
from sparkindex.preflight.source import STATEMENT_TIMEOUT_S, with_connect_timeout
from sparkindex.resources import open_source_url
from sparkindex.sources.base import Source
from sparkindex.sources.registry import replica_link

#: the check a run does not stop on (it waits for the replica itself)
REPLICA_LAG = "source.replica_lag"


def check_replica(pipeline: Pipeline, options: Options) -> list[Check]:
    read_url = pipeline.source.read_url
    if read_url is None:
        return []
    shown = redact_url(read_url)
    replica = _open(read_url, pipeline, options)
    primary = _open(pipeline.source_url(), pipeline, options)
    try:
        try:
            with replica.engine.connect() as conn:
                conn.execute(sa.select(sa.literal(1)))
        except sa.exc.DBAPIError as exc:
            fix = "start the replica, or correct the host, port, database, user and password in source.read_url"
            return [fail("source.read_url", f"{shown}: {first_line(exc)}", fix)]
        link = replica_link(primary, replica)
        position = link.primary_position()
        status = link.status(position)
        if not status.is_replica:
            detail = f"{shown} replicates from no primary: full loads read it as it is, with no wait"
            return [warn("source.read_url", detail, "point source.read_url at a replica of source.url")]
        checks = [ok("source.read_url", f"{shown} answers and is a replica")]
        if link.follows_primary() is False:
            detail = f"{shown} is a replica of another server than source.url: its rows are another database's"
            checks.append(fail("source.read_url", detail, "point source.read_url at a replica of source.url"))
            return checks
        bound = pipeline.source.max_replica_lag_s
        lag = "" if status.lag_s is None else f" ({status.lag_s:.1f}s)"
        if status.lag_s is not None and status.lag_s > bound:
            detail = (
                f"{shown} is {status.behind} of source.url's position {position}{lag}, "
                f"past source.max_replica_lag_s = {bound:g}s"
            )
            fix = (
                "let the replica catch up (is replay paused or replication broken?), or raise source.max_replica_lag_s"
            )
            checks.append(fail(REPLICA_LAG, detail, fix))
        else:
            checks.append(ok(REPLICA_LAG, f"{status.behind}{lag} (source.max_replica_lag_s = {bound:g}s)"))
        return checks
    finally:
        replica.close()
        primary.close()


def _open(url: str, pipeline: Pipeline, options: Options) -> Source:
    return open_source_url(
        with_connect_timeout(url, options.connect_timeout_s), STATEMENT_TIMEOUT_S, base_dir=pipeline.base_dir
    )
