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
from sparkindex.retry import Backoff
from sparkindex.sources.base import Source
from sparkindex.sources.registry import replica_link
from sparkindex.sources.replica import POLL_INITIAL_S, POLL_MAX_S, ReplicaLink, ReplicaStatus

#: the check a run does not stop on (it waits for the replica itself)
REPLICA_LAG = "source.replica_lag"
#: how long check lets a replica that is a little behind replay the primary's position
SETTLE_S = 3.0


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
            if link.is_primary():
                detail = f"{shown} is source.url's server itself: full loads read it as it is, with no wait"
                return [warn("source.read_url", detail, "point source.read_url at a replica of source.url")]
            detail = f"{shown} replicates from no primary and is not source.url's server: runs refuse it"
            return [fail("source.read_url", detail, "point source.read_url at a replica of source.url")]
        checks = [ok("source.read_url", f"{shown} answers and is a replica")]
        if link.follows_primary() is False:
            detail = f"{shown} is a replica of another server than source.url: its rows are another database's"
            checks.append(fail("source.read_url", detail, "point source.read_url at a replica of source.url"))
            return checks
        checks.append(_lag(pipeline, link, position, status, shown))
        return checks
    finally:
        replica.close()
        primary.close()


def _lag(pipeline: Pipeline, link: ReplicaLink, position: str, status: ReplicaStatus, shown: str) -> Check:
    """How far behind: replication that is stopped, broken or paused fails whatever its lag
    says (MariaDB reports no lag while its SQL thread is stopped); a replica that replays the
    primary's position within :data:`SETTLE_S` is current, however old its last transaction is
    (on a quiet primary the age of the last replayed commit is no lag at all)."""
    bound = pipeline.source.max_replica_lag_s
    if status.stalled:
        detail = f"{shown} is {status.behind} of source.url's position {position}"
        fix = "resume replay, or start (or repair) the replica's replication; runs wait for it and then refuse it"
        return fail(REPLICA_LAG, detail, fix)
    if status.behind.startswith("caught up") or _replays_soon(link, position):
        return ok(REPLICA_LAG, f"caught up (source.max_replica_lag_s = {bound:g}s)")
    status = link.status(position)
    lag = "" if status.lag_s is None else f" ({status.lag_s:.1f}s)"
    if status.lag_s is None or status.lag_s > bound or status.stalled:
        detail = f"{shown} is {status.behind} of source.url's position {position}{lag}, past {SETTLE_S:g}s"
        fix = "let the replica catch up (is replay paused or replication broken?), or raise source.max_replica_lag_s"
        return fail(REPLICA_LAG, detail + f" (source.max_replica_lag_s = {bound:g}s)", fix)
    return ok(REPLICA_LAG, f"{status.behind}{lag} (source.max_replica_lag_s = {bound:g}s)")


def _replays_soon(link: ReplicaLink, position: str) -> bool:
    """Whether the replica replays *position* within :data:`SETTLE_S` (polled as runs poll)."""
    backoff = Backoff(POLL_INITIAL_S, POLL_MAX_S, jitter=0.2, deadline_s=SETTLE_S)
    while not backoff.expired():
        if link.reached(position, backoff.next_delay()):
            return True
    return False


def _open(url: str, pipeline: Pipeline, options: Options) -> Source:
    return open_source_url(
        with_connect_timeout(url, options.connect_timeout_s), STATEMENT_TIMEOUT_S, base_dir=pipeline.base_dir
    )
