"""A process paused inside a store transaction does not hold up the driver taking its job over.

A VM pause or SIGSTOP can catch a driver's lock keeper between its UPDATE and its COMMIT (or a
worker inside its write-ahead record). Its row locks then stay until it wakes up, and the driver
taking over waits on them for as long: CI's chaos round saw a takeover stall for the whole of a
frozen driver's 100 s. PostgreSQL and MariaDB end such a session after
:data:`~sparkindex.coordination.idle_bound.IDLE_IN_TRANSACTION_S`, which frees the rows; fencing
tokens keep the paused process from doing harm when it wakes. The paused process here is real
(a Python process holding the lock row, stopped with SIGSTOP).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.idle_bound import IDLE_IN_TRANSACTION_S
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import make_tables

HOLD = """
import sys
import sqlalchemy as sa
from sparkindex.coordination.engine import make_engine
engine = make_engine(sys.argv[1])
conn = engine.connect()
conn.execute(sa.text(f"UPDATE {sys.argv[2]} SET last_heartbeat = last_heartbeat WHERE lock_key = 'products'"))
print("holding", flush=True)
sys.stdin.readline()  # the test's word, once it has resumed this process
try:
    conn.commit()
    print("committed", flush=True)
except sa.exc.DBAPIError as exc:
    print("refused:", type(exc.orig).__name__, flush=True)
"""
#: a lock wait shorter than the idle bound, as operators often set it: the takeover's waiting
#: statement then fails with 1205 before the paused session is ended, and must be rerun
SHORT_LOCK_WAIT = "SET SESSION innodb_lock_wait_timeout = 5"


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),  # MariaDB
    ]
)
def server_store(
    request: pytest.FixtureRequest, services: dict[str, str]
) -> Iterator[tuple[CoordinationStore, str, str]]:
    url, prefix = services[request.param], f"t{uuid.uuid4().hex[:8]}_"
    if request.param == "mysql":
        url = sa.make_url(url).update_query_dict({"init_command": SHORT_LOCK_WAIT}).render_as_string(False)
    store = CoordinationStore(url, prefix)
    try:
        yield store, url, prefix
    finally:
        store.close()
        engine = make_engine(url)
        make_tables(prefix).metadata.drop_all(engine)
        engine.dispose()


@pytest.mark.slow  # the server's bound, 30 s, is what it waits for
def test_a_lock_row_held_by_a_paused_process_is_freed_for_the_takeover(
    server_store: tuple[CoordinationStore, str, str],
) -> None:
    store, url, prefix = server_store
    first = store.locks.acquire("products", "vm:1:run-frozen", ttl_s=1.0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, url, f"{prefix}si_lock"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        os.kill(holder.pid, signal.SIGSTOP)  # paused between its UPDATE and its COMMIT
        deadline = time.monotonic() + 30
        while store.locks.unexpired(["products"]) and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the lock's own expiry (1 s on the store's clock)
        assert not store.locks.unexpired(["products"])

        taken: list[int] = []
        failed: list[BaseException] = []

        def take_over() -> None:
            try:
                taken.append(store.locks.acquire("products", "vm:2:run-new", ttl_s=8.0))
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                failed.append(exc)

        takeover = threading.Thread(target=take_over, daemon=True)
        started = time.monotonic()
        takeover.start()
        takeover.join(timeout=IDLE_IN_TRANSACTION_S + 30)
        waited = time.monotonic() - started
        assert taken == [first + 1], f"no takeover after {waited:.0f} s of the paused process: {failed}"
        assert waited > IDLE_IN_TRANSACTION_S - 5, f"took over in {waited:.0f} s: the row was never held"
        # the new lease counts from the takeover, not from before its wait (8 s < the wait)
        assert [lock.token for lock in store.locks.unexpired(["products"])] == [first + 1]

        os.kill(holder.pid, signal.SIGCONT)  # the paused process wakes, and commits what it held
        out, _ = holder.communicate("go\n", timeout=60)
        assert out.startswith("refused:"), out
        lock = store.locks.get("products")
        assert lock is not None and (lock.holder, lock.token) == ("vm:2:run-new", first + 1)
    finally:
        holder.kill()
        holder.wait(timeout=30)


def session_values(url: sa.URL, queries: list[str]) -> Iterator[tuple[dict[str, bool], tuple[object, ...]]]:
    """What *queries* answer in a transaction of each kind of store engine (pooled, autocommit,
    unpooled): each kind opens its sessions its own way, and each that runs transactions must
    get the bound in every one of them."""
    for kind in ({}, {"autocommit": True}, {"pooled": False}):
        engine = make_engine(url.render_as_string(hide_password=False), **kind)  # type: ignore[arg-type]
        with engine.connect() as conn:
            got = tuple(conn.exec_driver_sql(query).scalar() for query in queries)
        engine.dispose()
        yield kind, got


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("options", "pgoptions", "expected"),
    [
        (None, None, (f"{IDLE_IN_TRANSACTION_S}s", "0")),
        ("-c statement_timeout=5000", None, (f"{IDLE_IN_TRANSACTION_S}s", "5s")),
        ("-c idle_in_transaction_session_timeout=2000", None, ("2s", "0")),
        ("-c idle-in-transaction-session-timeout=3000", None, ("3s", "0")),
        (None, "-c idle_in_transaction_session_timeout=4000 -c statement_timeout=6000", ("4s", "6s")),
    ],
    ids=["default", "url-options-kept", "url-wins", "url-wins-hyphens", "pgoptions-wins"],
)
def test_a_store_session_keeps_the_operators_own_settings(
    services: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    options: str | None,
    pgoptions: str | None,
    expected: tuple[str, str],
) -> None:
    if pgoptions is None:
        monkeypatch.delenv("PGOPTIONS", raising=False)
    else:
        monkeypatch.setenv("PGOPTIONS", pgoptions)
    url = sa.make_url(services["postgres"])
    if options is not None:
        url = url.update_query_dict({"options": options})
    names = ("idle_in_transaction_session_timeout", "statement_timeout")
    operators = (options is not None and "idle" in options) or pgoptions is not None
    for kind, got in session_values(url, [f"SHOW {name}" for name in names]):
        if kind.get("autocommit") and not operators:
            # each statement commits on its own: no transaction to sit idle in, so no SET LOCAL
            # (a SET of the session would outlive the transaction behind PgBouncer)
            assert got == ("0", expected[1]), kind
        else:
            assert got == expected, kind


@pytest.mark.mysql
@pytest.mark.parametrize(
    ("init_command", "expected"),
    [
        (None, IDLE_IN_TRANSACTION_S),
        ("SET SESSION idle_transaction_timeout = 7", 7),
        # a bound on read-only transactions only leaves write transactions to ours
        ("SET SESSION idle_readonly_transaction_timeout = 9", IDLE_IN_TRANSACTION_S),
    ],
    ids=["default", "operator-wins", "readonly-only"],
)
def test_a_mariadb_store_session_is_bounded_unless_the_operator_bounded_it(
    services: dict[str, str], init_command: str | None, expected: int
) -> None:
    """MariaDB's bound is ``idle_transaction_timeout`` (MySQL has none). A value the session
    already has when it opens, from the server's configuration or the URL's ``init_command``, is
    the operator's and is kept."""
    url = sa.make_url(services["mysql"])
    if init_command is not None:
        url = url.update_query_dict({"init_command": init_command})
    for kind, got in session_values(url, ["SELECT @@SESSION.idle_transaction_timeout"]):
        assert got == (expected,), kind


@pytest.mark.postgres
def test_behind_pgbouncer_every_transaction_is_bounded_and_no_setting_leaks(
    services: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind transaction pooling the bound must come with each transaction (the next one may run
    on another server session), and must not stay on the server session for PgBouncer's next
    client: the store's ``SET LOCAL`` ends with its transaction; a session ``SET`` would not."""
    monkeypatch.delenv("PGOPTIONS", raising=False)
    store = make_engine(services["pgbouncer"])
    plain = sa.create_engine(
        services["pgbouncer"].replace("postgresql://", "postgresql+psycopg://"),
        isolation_level="AUTOCOMMIT",
        poolclass=sa.pool.NullPool,
        connect_args={"prepare_threshold": None},
    )
    show = "SHOW idle_in_transaction_session_timeout"
    try:
        for _ in range(3):
            with store.connect() as conn:
                assert conn.exec_driver_sql(show).scalar() == f"{IDLE_IN_TRANSACTION_S}s"
            with plain.connect() as other:  # PgBouncer lends it the session just returned
                assert other.exec_driver_sql(show).scalar() == "0", "the store's setting leaked to another client"
    finally:
        store.dispose()
        plain.dispose()
