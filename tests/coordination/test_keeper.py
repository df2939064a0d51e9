"""The lock keeper: it survives a coordination database that goes away, and reports a lost lock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from sparkindex.coordination.keeper import LockKeeper
from sparkindex.coordination.store import CoordinationStore
from tests.coordination.proxy import TcpProxy


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_taken_over_lock_calls_on_lost(store: CoordinationStore) -> None:
    token = store.locks.acquire("products", "driver-a", ttl_s=300)
    lost: list[str] = []
    keeper = LockKeeper(store, {"products": token}, ttl_s=300, every_s=0.05, on_lost=lost.append)
    keeper.start()
    try:
        # driver-b takes the lock because it judged driver-a gone. Not by expiring the lease
        # first: the keeper, alive here, renews an expired lease nobody took yet, and on a loaded
        # machine it did so between the expiry and driver-b's acquire (CI, 2e46fdf).
        taken = store.locks.acquire("products", "driver-b", ttl_s=300, holder_is_dead=lambda _lock: True)
        assert taken == token + 1
        assert wait_for(lambda: bool(lost)), "on_lost was never called"
        assert len(lost) == 1 and "products" in lost[0]
        assert keeper.lost == lost[0]
    finally:
        keeper.stop()


@pytest.fixture
def through_proxy(store_url: tuple[str, str]) -> Iterator[tuple[CoordinationStore, TcpProxy, CoordinationStore]]:
    """(a store reaching PostgreSQL through a proxy the test can stop, the proxy, a direct store)."""
    url, prefix = store_url
    port = sa.make_url(url).port or 5432
    proxy = TcpProxy("127.0.0.1", port)
    proxy.start()
    direct = CoordinationStore(url, prefix)
    proxied = CoordinationStore(url.replace(f":{port}/", f":{proxy.port}/"), prefix)
    try:
        yield proxied, proxy, direct
    finally:
        proxy.stop()
        proxied.close()
        direct.close()


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_keeper_survives_a_database_outage_and_refreshes_after(
    through_proxy: tuple[CoordinationStore, TcpProxy, CoordinationStore],
) -> None:
    """Today an OperationalError kills the keeper's thread silently; it must log and keep going."""
    store, proxy, direct = through_proxy
    lost: list[str] = []
    token = store.locks.acquire("products", "driver-a", ttl_s=60)
    keeper = LockKeeper(store, {"products": token}, ttl_s=60, every_s=0.05, on_lost=lost.append)
    keeper.start()
    try:
        time.sleep(0.3)
        proxy.stop()  # the database "goes away": open connections cut, new ones refused
        time.sleep(1.0)  # many refreshes fail meanwhile
        assert keeper.alive, "the keeper thread died on a store error"
        before = direct.locks.get("products")
        assert before is not None
        proxy.start()

        def refreshed() -> bool:
            rec = direct.locks.get("products")
            return rec is not None and rec.last_heartbeat > before.last_heartbeat

        assert wait_for(refreshed), "no refresh after the database came back"
        assert keeper.alive and not lost and keeper.lost is None
    finally:
        keeper.stop()


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_keeper_declares_the_lock_lost_once_failures_outlast_the_ttl(
    through_proxy: tuple[CoordinationStore, TcpProxy, CoordinationStore],
) -> None:
    store, proxy, _ = through_proxy
    lost: list[str] = []
    token = store.locks.acquire("products", "driver-a", ttl_s=1.0)
    keeper = LockKeeper(store, {"products": token}, ttl_s=1.0, every_s=0.05, on_lost=lost.append)
    keeper.start()
    try:
        proxy.stop()
        assert wait_for(lambda: bool(lost), timeout=10), "a lock that may have expired was never reported"
        assert "products" in lost[0] and "TTL" in lost[0]
        assert len(lost) == 1
    finally:
        keeper.stop()
