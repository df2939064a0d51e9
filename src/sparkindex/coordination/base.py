"""What every part of the SQL coordination store shares: the engine, the tables, reruns and fences.

A *fence* is the set of alias locks a driver holds, ``{alias: token}``. Every driver-side write
carries it as ``AND EXISTS (SELECT 1 FROM lock WHERE lock_key = :alias AND token = :token)`` per
alias, so a driver whose lock was taken over (its token grew) writes nothing: the check and the
write are one statement, not check-then-act.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from sparkindex.coordination.tables import Tables
from sparkindex.errors import LockLost
from sparkindex.retry import Backoff

T = TypeVar("T")

#: alias -> fencing token of the lock its driver holds
Fence = Mapping[str, int]

#: MySQL/MariaDB: deadlock, lock wait timeout, server gone away, lost connection, cannot connect.
_MYSQL_RERUN = (1213, 1205, 2006, 2013, 2003)
#: PostgreSQL: deadlock, serialization failure, admin/crash shutdown, server starting up.
_PG_RERUN = ("40P01", "40001", "57P01", "57P02", "57P03")
#: how long a store call keeps rerunning, from its first attempt
RERUN_DEADLINE_S = 120.0
#: a tighter bound a caller puts on the reruns of every store call it makes (see :func:`reruns_until`)
_RERUN_UNTIL: ContextVar[Callable[[], float] | None] = ContextVar("rerun_until", default=None)


@contextlib.contextmanager
def reruns_until(deadline: Callable[[], float]) -> Iterator[None]:
    """Store calls made in this block (this thread or task) stop rerunning once ``time.monotonic()``
    reaches ``deadline()``, read again at every failure, as well as after ``RERUN_DEADLINE_S``.

    A partition worker bounds its calls by its lease (the time until it can no longer prove its
    claim is its own): rerunning beyond that would only outlast the claim it is trying to keep.
    """
    token = _RERUN_UNTIL.set(deadline)
    try:
        yield
    finally:
        _RERUN_UNTIL.reset(token)


def retryable(exc: DBAPIError) -> bool:
    """Deadlocks, serialization failures and dropped connections: the transaction may simply rerun.

    A dropped pooled connection is how a server restart shows now that checkouts are not pinged
    (a ping per checkout would be one more round trip per statement): SQLAlchemy flags it as
    ``connection_invalidated`` and discards the whole pool, so the rerun gets a fresh connection.
    """
    code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    return (
        bool(exc.connection_invalidated)
        or code in _MYSQL_RERUN
        or sqlstate in _PG_RERUN
        or sqlstate.startswith("08")  # connection exceptions
    )


def rerun_on_conflict(fn: Callable[..., T]) -> Callable[..., T]:
    """Rerun a whole store transaction that the database aborted as a deadlock victim or lost to a
    restart; capped backoff with jitter. Every write it wraps must be safe to run again: fenced
    writes are (a rerun after a lost reply finds its own result or is refused)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        started = time.monotonic()
        backoff: Backoff | None = None  # made on the first failure: the hot path builds none
        while True:
            try:
                return fn(*args, **kwargs)
            except DBAPIError as exc:
                if not retryable(exc):
                    raise
                if backoff is None:  # the deadline still counts from the call
                    backoff = Backoff(
                        initial_s=0.005, max_s=1.0, deadline_s=max(0.0, RERUN_DEADLINE_S - (time.monotonic() - started))
                    )
                until = _RERUN_UNTIL.get()
                left = None if until is None else until() - time.monotonic()
                if backoff.expired() or (left is not None and left <= 0):
                    raise
                delay = backoff.next_delay()
                time.sleep(delay if left is None else min(delay, left))

    return wrapper


def alias_key(aliases: Sequence[str]) -> str:
    return ",".join(sorted(aliases))


class StoreBase:
    """One concept of the store over a shared engine and table set (usable on its own).

    *single* runs one-statement writes (the worker's claim, progress and completion): on a
    server an autocommit engine, so each costs one round trip instead of BEGIN, the statement
    and COMMIT; on SQLite the main engine (its writes need BEGIN IMMEDIATE).
    """

    def __init__(self, engine: Engine, tables: Tables, single: Engine | None = None) -> None:
        self.engine = engine
        self.single = single or engine
        self.t = tables

    @rerun_on_conflict
    def now(self) -> float:
        """The store's clock (:func:`store_now`): what leases and parked partitions are judged on."""
        with self.engine.connect() as conn:
            return store_now(conn)

    def fence_conditions(self, fence: Fence | None) -> list[sa.ColumnElement[bool]]:
        """One EXISTS per fenced alias, to AND into a driver's UPDATE."""
        if not fence:
            return []
        lt = self.t.lock
        return [
            sa.exists().where(lt.c.lock_key == alias, lt.c.token == token) for alias, token in sorted(fence.items())
        ]

    def check_fence(self, conn: sa.Connection, fence: Fence | None, what: str) -> None:
        """Raise :class:`LockLost` naming *what* and the first alias whose lock the fence no longer holds."""
        if not fence:
            return
        lt = self.t.lock
        rows = {r.lock_key: r for r in conn.execute(sa.select(lt).where(lt.c.lock_key.in_(list(fence))))}
        for alias, token in sorted(fence.items()):
            row = rows.get(alias)
            if row is None or row.token != token:
                now = "no lock" if row is None else f"token {row.token}, held by {row.holder}"
                raise LockLost(f"{what}: the lock on alias {alias!r} is no longer held by token {token} ({now})")


#: the store's clock in seconds since the epoch, as SQL. MySQL/MariaDB: UTC_TIMESTAMP does not
#: depend on the session's time zone, where UNIX_TIMESTAMP(NOW()) goes back an hour in the repeated
#: hour of a DST change; divided by a float, a DOUBLE (an integer divisor gives a DECIMAL of
#: div_precision_increment places)
_CLOCK_SQL = {
    "postgresql": "extract(epoch from clock_timestamp())",
    "mysql": "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6)",
    "mariadb": "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6)",
}


def store_now(conn: sa.Connection) -> float:
    """The store's own clock, in seconds since the epoch. Leases that one process writes and
    another reads (holds, sync presence) compare on this one clock: a reader whose wall clock
    jumped (NTP, a resumed VM) would otherwise see a live lease as expired, or a dead one as live.
    SQLite runs inside the process, on the process's clock, so there it is the same."""
    sql = _CLOCK_SQL.get(conn.dialect.name)
    if sql is None:
        return time.time()
    return float(conn.exec_driver_sql(f"SELECT {sql}").scalar_one())


def store_clock(dialect: sa.engine.Dialect) -> sa.ColumnElement[float]:
    """:func:`store_now` inside a statement, for one that writes or compares a lease in the same
    step (a claim, a heartbeat): the store's clock, read by the store. On SQLite it is the bound
    parameter ``b_now``, which the caller sets to ``time.time()``."""
    sql = _CLOCK_SQL.get(dialect.name)
    if sql is None:
        return sa.bindparam("b_now", type_=sa.Float(precision=53))
    return sa.literal_column(sql, sa.Float(precision=53))
