"""Connection poolers in transaction pooling (PgBouncer's ``pool_mode = transaction``).

Behind such a pooler each transaction of a client may run on another server session, so nothing
a session holds survives from one transaction to the next: ``SET`` without ``LOCAL``,
session-level advisory locks, protocol-level prepared statements (PgBouncer before 1.21), startup
options. What each part of sparkindex needs:

- the coordination store needs no session: its settings are ``SET LOCAL`` per transaction, its
  schema lock is a transaction's advisory lock, and it never prepares statements. A store behind
  a transaction pooler is reported as supported.
- a PostgreSQL source does need one: its statement timeout is a setting of the session given at
  connect (a startup option that PgBouncer refuses), and its repeated page queries are prepared by
  the driver. A source (or read replica) behind a transaction pooler is refused here, with the
  fix, rather than failing mid-run.

How a pooler is recognised: client A runs a statement and lets its transaction end; client B then
holds a transaction open; A runs again. Directly on PostgreSQL (or under session pooling) A's
server session is its own for as long as A is connected, so A sees the same backend both times and
B never sees A's. Under transaction pooling A's server session went back to the pool when its
transaction ended, and PgBouncer lends the most recently returned one first: B gets it, and A's
second statement runs on another. The probe can only miss a pooler (one lending in another order),
never see one that is not there.
"""

from __future__ import annotations

import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.preflight.model import Check, fail, ok

SOURCE_FIX = (
    "point source.url (and source.read_url) at PostgreSQL itself or at a replica; only coordination.url may go "
    "through a pooler in transaction pooling"
)


def transaction_pooled(url: str) -> bool:
    """Whether *url* (PostgreSQL) reaches its server through a pooler in transaction pooling
    (see the module's docstring). Raises the driver's error when it cannot connect."""
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
            first = a.execute(backend).scalar()
            held = b.execution_options(isolation_level="READ COMMITTED")  # a real BEGIN, held open
            with held.begin():
                lent = held.execute(backend).scalar()
                second = a.execute(backend).scalar()
        return lent == first or second != first
    finally:
        engine.dispose()


def check_pooling(pipeline: Pipeline) -> list[Check]:
    """The store behind a transaction pooler is fine (said so); a PostgreSQL source is refused."""
    checks: list[Check] = []
    store = pipeline.coordination_url()
    if _is_postgres(store):
        try:
            if transaction_pooled(store):
                checks.append(
                    ok(
                        "store.pooler",
                        f"{redact_url(store)}: behind a pooler in transaction pooling; supported (the store keeps no "
                        "session state)",
                    )
                )
        except sa.exc.DBAPIError:
            pass  # unreachable: the store's own check reports it
    for key, url in _source_urls(pipeline):
        if not _is_postgres(url):
            continue
        try:
            pooled = transaction_pooled(url)
        except sa.exc.DBAPIError as exc:
            if "unsupported startup parameter" in str(exc.orig):
                pooled = True  # PgBouncer refusing a startup option before the probe could run
            else:
                continue  # unreachable: the source's own check reports it
        if pooled:
            checks.append(
                fail(
                    "source.pooler",
                    f"{pipeline.origin}: {key}: {redact_url(url)} is behind a connection pooler in transaction "
                    "pooling, and the source needs a session of its own: its statement timeout is set for the "
                    "session when it connects (a startup option PgBouncer refuses) and the driver prepares its "
                    "repeated page queries on the session",
                    SOURCE_FIX,
                )
            )
    return checks


def _source_urls(pipeline: Pipeline) -> list[tuple[str, str]]:
    urls = [("source.url", pipeline.source.url)]
    read_url = getattr(pipeline.source, "read_url", None)
    if read_url:
        urls.append(("source.read_url", str(read_url)))
    return urls


def _is_postgres(url: str) -> bool:
    return url.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres")
