"""Connection poolers (PgBouncer) in front of PostgreSQL, and what each part of sparkindex needs.

Behind a pooler in transaction pooling each transaction of a client may run on another server
session, so nothing a session holds survives from one transaction to the next: ``SET`` without
``LOCAL``, session-level advisory locks, protocol-level prepared statements (PgBouncer before
1.21), startup options.

- The coordination store needs no session: its settings are ``SET LOCAL`` per transaction, its
  schema lock is a transaction's advisory lock, and it never prepares statements. A store behind
  a transaction pooler is reported as supported (``check`` only; a best-effort probe, below). A
  pooler in *statement* pooling refuses transactions, which the store needs: refused, with the fix.
- A PostgreSQL source does need one: its statement timeout is a setting of the session, given
  at connect as a startup option. PgBouncer refuses that option, or, told to ignore it
  (``ignore_startup_parameters = options``), drops it. Either way it is seen directly: the
  source's own connection is made and its timeout read back. A source (or read replica) whose
  timeout is not in effect is refused, with the fix, rather than running unbounded queries.

How a transaction pooler in front of the store is recognised (informational, so best effort):
client A runs a statement and lets its transaction end; client B then holds a transaction open;
A runs again. Directly on PostgreSQL (or under session pooling) A's server session is its own for
as long as A is connected, so A sees the same backend both times and B never sees A's. Under
transaction pooling A's server session went back to the pool, and PgBouncer lends the most
recently returned one first (unless ``server_round_robin`` is on): B gets it, or A's second
statement runs on another. A miss only loses the informational line. The probe is cancelled after
``PROBE_S`` (a pool whose every server connection is busy would keep A waiting behind B).
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.preflight.model import Check, Options, fail, ok
from sparkindex.preflight.source import with_connect_timeout
from sparkindex.resources import open_source_url
from sparkindex.sources.registry import url_scheme

#: how long the store's probe may take before it is cancelled (and nothing is reported)
PROBE_S = 3.0
#: the statement timeout the source's probe asks for (read back to see that it is in effect)
PROBE_TIMEOUT_S = 123.0

SOURCE_FIX = (
    "point source.url (and source.read_url) at PostgreSQL itself or at a replica; only coordination.url may go "
    "through a pooler in transaction pooling"
)
STATEMENT_POOLING = "statement pooling"


def transaction_pooled(url: str) -> bool | None:
    """Whether *url* (PostgreSQL) reaches its server through a pooler in transaction pooling (see
    the module's docstring); None when the probe could not tell within ``PROBE_S``. Raises the
    driver's error when it cannot connect (or a statement pooler refuses the transaction)."""
    parsed = sa.make_url(normalize_url(url)).difference_update_query(["options"])
    engine = sa.create_engine(
        parsed,
        poolclass=sa.pool.NullPool,
        isolation_level="AUTOCOMMIT",
        connect_args={"connect_timeout": 10, "prepare_threshold": None},
    )
    backend = sa.text("SELECT pg_backend_pid()")
    try:
        with engine.connect() as a, engine.connect() as b:
            fired = threading.Event()
            timer = threading.Timer(PROBE_S, _cancel, (fired, a, b))
            timer.start()
            try:
                first = a.execute(backend).scalar()
                held = b.execution_options(isolation_level="READ COMMITTED")  # a real BEGIN, held open
                with held.begin():
                    lent = held.execute(backend).scalar()
                    second = a.execute(backend).scalar()
            except sa.exc.DBAPIError:
                if fired.is_set():
                    return None  # cancelled: every server connection was busy
                raise
            finally:
                timer.cancel()
        return lent == first or second != first
    finally:
        engine.dispose()


def _cancel(fired: threading.Event, *conns: sa.Connection) -> None:
    fired.set()
    for conn in conns:
        dbapi: Any = conn.connection.dbapi_connection
        if dbapi is not None:
            dbapi.cancel()


def check_pooling(pipeline: Pipeline, options: Options) -> list[Check]:
    """The store behind a transaction pooler is said to be fine (``check`` only) and refused
    behind a statement pooler; a PostgreSQL source whose statement timeout a pooler refused or
    dropped is refused."""
    checks: list[Check] = []
    store = pipeline.coordination_url()
    if _is_postgres(store) and options.scope == "check":
        checks.extend(_store(store))
    for key, url in _source_urls(pipeline):
        if _is_postgres(url):
            checks.extend(_source(pipeline, key, url, options.connect_timeout_s))
    return checks


def _store(url: str) -> list[Check]:
    shown = redact_url(url)
    try:
        pooled = transaction_pooled(url)
    except sa.exc.DBAPIError as exc:
        if STATEMENT_POOLING in str(exc.orig):
            return [
                fail(
                    "store.pooler",
                    f"coordination.url: {shown} is behind a pooler in statement pooling, which refuses transactions "
                    "(the store runs several statements in one)",
                    "set pool_mode = transaction (or session) for the store's database in PgBouncer",
                )
            ]
        return []  # unreachable: the store's own check reports it
    if not pooled:
        return []
    detail = f"{shown}: behind a pooler in transaction pooling; supported (the store keeps no session state)"
    return [ok("store.pooler", detail)]


def _source(pipeline: Pipeline, key: str, url: str, connect_timeout_s: float) -> list[Check]:
    """Open the source as a run does and read its statement timeout back."""
    shown = redact_url(url)
    expected_ms = round(PROBE_TIMEOUT_S * 1000)
    bounded = with_connect_timeout(url, connect_timeout_s)
    try:
        with open_source_url(bounded, PROBE_TIMEOUT_S) as source, source.engine.connect() as conn:
            got = conn.execute(sa.text("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'")).scalar()
    except sa.exc.DBAPIError as exc:
        if "unsupported startup parameter" not in str(exc.orig):
            return []  # unreachable: the source's own check reports it
        why = "refuses the startup option that sets it"
    else:
        if got is not None and int(got) == expected_ms:
            return []
        why = f"dropped it (the session has statement_timeout = {got} ms)"
    return [
        fail(
            "source.pooler",
            f"{pipeline.origin}: {key}: {shown} is behind a connection pooler, and the source needs a session of "
            f"its own: its statement timeout is set for the session when it connects, and the pooler {why}",
            SOURCE_FIX,
        )
    ]


def _source_urls(pipeline: Pipeline) -> list[tuple[str, str]]:
    urls = [("source.url", pipeline.source_url())]
    read_url = pipeline.source.read_url
    if read_url:
        urls.append(("source.read_url", pipeline.read_source_url()))
    return urls


def _is_postgres(url: str) -> bool:
    return url_scheme(url) == "postgresql"
