"""The worker's hot statements run on the driver's own cursor (PostgreSQL through psycopg).

Why: a claim is three one-statement writes (claim, progress, complete). SQLAlchemy's execution
path (pool checkout and reset, execution context, result and row objects) cost about 0.8 ms of
client CPU per claim against under 0.4 ms for the same SQL on psycopg's cursor, and sixteen
claimers share two cores with the database: that CPU is claims per second.

What stays SQLAlchemy's: the statements (Core, compiled once to the dialect's SQL), the
connections (made by the engine, so its URL, connect arguments and autocommit level apply), and
the error contract: a driver error becomes the :class:`sqlalchemy.exc.DBAPIError` SQLAlchemy
would have raised, flagged ``connection_invalidated`` on a disconnect, so
:func:`~sparkindex.coordination.base.rerun_on_conflict` reruns exactly what it reran before.

Each thread keeps one connection of its own (a claimer thread runs its three statements back to
back, and a pool checkout and reset per statement were a third of the cost), made by an unpooled
autocommit engine for the store's URL: a dead one is replaced by a new connection, never by
another pooled one that died with the same server. A connection is thrown away after any failure
that leaves it anything but idle, when it is older than ``RECYCLE_S``, in a forked child, when its
thread ends (a worker's lease renewer is a thread per partition: its connection must not outlive
it), and by :meth:`DirectConnections.close` (every thread's, really closed; the store may go on
afterwards).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

Processor = Callable[[Any], Any] | None

log = logging.getLogger(__name__)

#: like the pool's ``pool_recycle``: a connection older than this is replaced before its next use
RECYCLE_S = 1800.0


def direct_capable(engine: Engine) -> bool:
    """Engines whose hot statements run directly: psycopg's, with UPDATE ... RETURNING. (The
    engine must be the store's autocommit one: each statement is its own transaction.)"""
    return engine.dialect.driver == "psycopg" and bool(engine.dialect.update_returning)


class DirectConnections:
    """One connection per thread, made by *engine* (unpooled, autocommit) and closed with :meth:`close`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.local()
        #: every open connection and the finalizer that closes it with its thread
        self._open: dict[Any, weakref.finalize[..., Any]] = {}
        self._guard = threading.Lock()
        self._generation = 0  # bumped by close(): connections of an earlier generation are gone

    def connection(self) -> Any:
        """This thread's DBAPI connection, made on first use (and after a discard or a close)."""
        local = self._local
        held: _Held | None = getattr(local, "held", None)
        if held is not None and (
            held.generation != self._generation or held.pid != os.getpid() or time.monotonic() - held.born >= RECYCLE_S
        ):
            self.discard()
            held = None
        if held is None:
            fairy = self.engine.raw_connection()
            if not getattr(fairy.dbapi_connection, "autocommit", False):
                fairy.close()
                raise TypeError("direct statements need an autocommit engine (each statement its own transaction)")
            with self._guard:
                held = _Held(fairy, time.monotonic(), os.getpid(), self._generation)
                # a thread that ends drops its thread-local holder: its connection is closed then,
                # not kept open for the store's life (a lease renewer is a thread per partition).
                # The callback holds the table and lock, not this object, which may then go.
                self._open[fairy] = held.finalizer = weakref.finalize(
                    held, _release, self._open, self._guard, fairy, held.pid
                )
                held.finalizer.atexit = False  # at exit the process's sockets close anyway
            local.held = held
        return held.fairy.dbapi_connection

    def discard(self) -> None:
        """Close this thread's connection (it failed, is due for recycling, or was closed)."""
        held: _Held | None = getattr(self._local, "held", None)
        self._local.held = None
        if held is not None and held.finalizer is not None:
            held.finalizer()  # runs once: closes the connection now

    def open_count(self) -> int:
        """How many threads hold a connection now."""
        with self._guard:
            return len(self._open)

    def close(self) -> None:
        """Close every thread's connection (the store is closing); a later statement reconnects."""
        with self._guard:
            fairies = list(self._open.items())
            self._open.clear()
            self._generation += 1
        for fairy, finalizer in fairies:
            if finalizer.detach() is not None:  # not already closed by its thread's end
                _close(fairy)


def _release(open_: dict[Any, Any], guard: threading.Lock, fairy: Any, pid: int) -> None:
    """A thread's connection is done with (its thread ended, or it was discarded): close it.
    In a forked child (whose other threads' holders go during the fork itself) nothing is
    touched: the parent's lock may have been held at the fork, and the connection is the parent's."""
    if pid != os.getpid():
        return
    with guard:
        open_.pop(fairy, None)
    _close(fairy)


class _Held:
    """A thread's connection, kept in its thread-local storage (freed with the thread)."""

    __slots__ = ("__weakref__", "born", "fairy", "finalizer", "generation", "pid")

    def __init__(self, fairy: Any, born: float, pid: int, generation: int) -> None:
        self.fairy, self.born, self.pid, self.generation = fairy, born, pid, generation
        self.finalizer: weakref.finalize[..., Any] | None = None


def _close(fairy: Any) -> None:
    try:
        fairy.close()  # unpooled: really closed
    except Exception as exc:  # noqa: BLE001 - closing a connection that already failed
        log.debug("closing a direct connection: %s", exc)


class DirectStatement:
    """One Core UPDATE, compiled once, executed with named parameters on this thread's connection."""

    def __init__(self, connections: DirectConnections, stmt: sa.Update) -> None:
        self.connections = connections
        dialect = connections.engine.dialect
        self.compiled = stmt.compile(dialect=dialect)
        self.sql = str(self.compiled)
        self.returning = list(getattr(self.compiled, "returning", None) or [])
        for name, bind in self.compiled.binds.items():
            if bind.type.dialect_impl(dialect).bind_processor(dialect) is not None:
                raise TypeError(f"{name}: a type with a bind processor cannot run directly ({bind.type!r})")
        self._names: list[str] | None = None
        self._processors: list[Processor] = []

    def run(self, params: Mapping[str, Any]) -> tuple[int, dict[str, Any] | None]:
        """(rows matched, the first row returned as a name -> value dict, if the statement returns)."""
        full = self.compiled.construct_params(dict(params))
        conn = self.connections.connection()
        try:
            with conn.cursor() as cursor:
                cursor.execute(self.sql, full)
                rowcount = cursor.rowcount
                row = cursor.fetchone() if self.returning else None
                description = cursor.description
        except BaseException as exc:
            if not _idle(conn):
                self.connections.discard()  # mid-statement or broken: the next one connects afresh
            if isinstance(exc, self.connections.engine.dialect.loaded_dbapi.Error):
                raise self._wrapped(exc, conn, full) from exc
            raise
        if row is None:
            return rowcount, None
        return rowcount, self._mapping(row, description)

    def _mapping(self, row: tuple[Any, ...], description: Any) -> dict[str, Any]:
        if self._names is None:
            dialect = self.connections.engine.dialect
            self._processors = [
                column.type.dialect_impl(dialect).result_processor(dialect, field[1])
                for column, field in zip(self.returning, description, strict=True)
            ]
            self._names = [field[0] for field in description]
        values = [v if p is None else p(v) for p, v in zip(self._processors, row, strict=True)]
        return dict(zip(self._names, values, strict=True))

    def _wrapped(self, exc: Any, conn: Any, params: Mapping[str, Any]) -> sa.exc.StatementError:
        dialect = self.connections.engine.dialect
        disconnect = bool(dialect.is_disconnect(exc, conn, None)) or bool(conn.closed)
        if disconnect:
            self.connections.discard()
        wrapped: sa.exc.StatementError = sa.exc.DBAPIError.instance(
            self.sql,
            params,
            exc,
            dialect.loaded_dbapi.Error,
            hide_parameters=True,
            dialect=dialect,
            connection_invalidated=disconnect,
        )
        return wrapped


def _idle(conn: Any) -> bool:
    """Whether the connection is open, with no statement running and no transaction left over."""
    try:
        import psycopg

        return not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    except Exception:  # noqa: BLE001 - a connection that cannot even say is not idle
        return False
