"""A store session left idle inside a transaction is ended by the server.

The store's transactions are milliseconds of work between statements, so a session idle in one
for seconds belongs to a process that is paused (a VM pause, SIGSTOP). Its row locks would
otherwise hold up the driver taking its job over until it woke up (chaos ``stop_driver``: a
worker frozen inside its write-ahead record kept the partition row the takeover resets, and the
lock keeper can be frozen between its UPDATE and COMMIT). Fencing tokens keep the paused process
from doing harm when it wakes; its statement then fails as a dropped connection and reruns.

Each server has its own setting; a value the operator gave wins:
- PostgreSQL: ``idle_in_transaction_session_timeout``, unless the URL's ``options`` or
  ``PGOPTIONS`` set it. ``SET LOCAL`` as the first statement of every transaction of an engine
  that runs transactions (an autocommit engine runs none, so it cannot sit idle in one): a
  ``SET`` of the session would hold only for whichever server session PgBouncer's transaction
  pooling lends the next transaction, and would leak into other clients' transactions there;
  libpq's ``options`` startup parameter would replace ``PGOPTIONS``, and PgBouncer refuses it.
- MariaDB (10.3 and later): ``idle_transaction_timeout``, unless the session already has an idle
  transaction bound when it opens (the server's configuration, or the URL's ``init_command``).
- MySQL has no such setting: there InnoDB fails the *waiting* statement after
  ``innodb_lock_wait_timeout``, and the store reruns it (``rerun_on_conflict``) until the paused
  process or its connection goes, or until the rerun deadline, when the takeover exits 3.

An operator's own value may be longer than ours; the takeover then waits as long.
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


def bound_idle_transactions(engine: Engine, scheme: str, url: str, *, autocommit: bool) -> None:
    """Install the bound for *engine*'s server kind (*scheme* of the normalized *url*); an
    *autocommit* engine on PostgreSQL needs none (each statement commits on its own)."""
    if scheme == "postgresql" and not autocommit:
        _bound_postgres(engine, url)
    elif scheme == "mysql":
        _bound_mariadb(engine)


def _bound_postgres(engine: Engine, url: str) -> None:
    given = sa.make_url(url).query.get("options") or ""
    own = " ".join(given) if isinstance(given, tuple) else given
    if "idle_in_transaction_session_timeout" in f"{own} {os.environ.get('PGOPTIONS', '')}".replace("-", "_"):
        return
    statement = f"SET LOCAL idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_S * 1000}"

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql(statement)  # opens the transaction: the bound ends with it


def _bound_mariadb(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        # No row on MySQL or on MariaDB before 10.3, which have no such setting. The server's own
        # idle_write_ or idle_readonly_ value, where set, still overrides ours for its kind of
        # transaction: MariaDB falls back to idle_transaction_timeout only where they are 0.
        cur.execute("SHOW SESSION VARIABLES LIKE 'idle\\_transaction\\_timeout'")
        row = cur.fetchone()
        if row is not None and int(row[1]) == 0:
            cur.execute(f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_S}")
        elif row is not None:
            log.debug("store session keeps its own idle_transaction_timeout of %s s", row[1])
        cur.close()
        dbapi_conn.commit()  # leave no transaction open (a no-op under autocommit)
