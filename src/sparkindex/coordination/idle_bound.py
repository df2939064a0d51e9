"""A store session left idle inside a transaction is ended by the server.

The store's transactions are milliseconds of work between statements, so a session idle in one
for seconds belongs to a process that is paused (a VM pause, SIGSTOP). Its row locks would
otherwise hold up the driver taking its job over until it woke up (chaos ``stop_driver``: a
worker frozen inside its write-ahead record kept the partition row the takeover resets, and the
lock keeper can be frozen between its UPDATE and COMMIT). Fencing tokens keep the paused process
from doing harm when it wakes; its statement then fails as a dropped connection and reruns.

Each server has its own setting, set when a session opens; a value the operator gave wins:
- PostgreSQL: ``idle_in_transaction_session_timeout``, unless the URL's ``options`` or
  ``PGOPTIONS`` set it. A ``SET`` rather than libpq's ``options`` startup parameter: that would
  replace ``PGOPTIONS``, and PgBouncer refuses it.
- MariaDB: ``idle_transaction_timeout``, unless the session already has one when it opens (the
  server's configuration, or the URL's ``init_command``).
- MySQL has no such setting: there InnoDB fails the *waiting* statement after
  ``innodb_lock_wait_timeout``, the store reruns it, and the takeover waits for the paused process
  or its connection to go.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

#: how long a store session may sit idle inside a transaction before its server ends it
IDLE_IN_TRANSACTION_S = 30


def bound_idle_transactions(engine: Engine, url: str) -> None:
    """Install the bound for *engine*'s server kind (*url* already normalized); nothing for SQLite."""
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme == "postgresql":
        _bound_postgres(engine, url)
    elif scheme == "mysql":
        _bound_mariadb(engine)


def _bound_postgres(engine: Engine, url: str) -> None:
    given = sa.make_url(url).query.get("options") or ""
    own = " ".join(given) if isinstance(given, tuple) else given
    if "idle_in_transaction_session_timeout" in f"{own} {os.environ.get('PGOPTIONS', '')}".replace("-", "_"):
        return
    statement = f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_S * 1000}"

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(statement)
        cur.close()
        if not getattr(dbapi_conn, "autocommit", False):
            dbapi_conn.commit()  # the SET holds for the session; leave no transaction open


def _bound_mariadb(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        try:
            # one round trip; MySQL has no such variable, so it is asked for only on MariaDB
            cur.execute("SELECT VERSION() LIKE '%MariaDB%'")
            (mariadb,) = cur.fetchone()
            if not mariadb:
                return
            cur.execute("SELECT @@SESSION.idle_transaction_timeout")
            (current,) = cur.fetchone()
            if current:
                log.debug("store session keeps its idle_transaction_timeout of %s s", current)
                return
            cur.execute(f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_S}")
        finally:
            cur.close()
            dbapi_conn.commit()  # leave no transaction open (a no-op under autocommit)
