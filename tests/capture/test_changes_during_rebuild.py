"""Changes committed during a rebuild are in the new index, on PostgreSQL and MariaDB: a writer
commits inserts, updates and deletes continuously while a full reindex runs; when the alias
moves, the new index holds every change up to the position the
catch-up reached (Pc), and differs from the source only in documents that commits after Pc touched.
The live sync then continues from Pc and the index equals the source."""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.coordination.store import CoordinationStore
from tests.capture.helpers import HOSTILE, KINDS, Shop, commit_position, drop_shop, make_shop, wait_until
from tests.cli_process import LoggedProcess

pytestmark = pytest.mark.slow


class Writer(threading.Thread):
    """Inserts, updates and deletes, one transaction each, logging every commit's WAL position
    (read right after the commit, so at or past its end) and the products it touched."""

    def __init__(self, shop: Shop, products: int, kind: str) -> None:
        super().__init__(daemon=True)
        self.shop = shop
        self.kind = kind
        self.stop = threading.Event()
        self.log: list[tuple[int, int]] = []  # (position after the commit, product id)
        self.error: BaseException | None = None
        self.next_id = 1_000_000
        self.existing = list(range(1, products + 1))

    def run(self) -> None:
        rng = random.Random(11)
        engine = self.shop.engine()
        try:
            with engine.connect() as conn:
                n = 0
                while not self.stop.is_set() and n < 50_000:
                    n += 1
                    kind = rng.random()
                    if kind < 0.3:
                        product = self.next_id
                        self.next_id += 1
                        conn.exec_driver_sql("BEGIN")
                        conn.exec_driver_sql(
                            "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
                            "VALUES (%(id)s, %(n)s, 'new', 2.5, 1, 1, '2026-02-02 00:00:00')",
                            {"id": product, "n": f"{HOSTILE[n % len(HOSTILE)]} new {n}"},
                        )
                        conn.exec_driver_sql(
                            "INSERT INTO reviews (id, product_id, author_id, rating, body) "
                            "VALUES (%(id)s, %(id)s, 1, 5, %(b)s)",
                            {"id": product, "b": HOSTILE[(n + 1) % len(HOSTILE)]},
                        )
                        conn.exec_driver_sql("COMMIT")
                        self.existing.append(product)
                    elif kind < 0.45 and len(self.existing) > 10:
                        product = self.existing.pop(rng.randrange(len(self.existing)))
                        conn.exec_driver_sql("BEGIN")
                        conn.exec_driver_sql("DELETE FROM reviews WHERE product_id = %(id)s", {"id": product})
                        conn.exec_driver_sql("DELETE FROM products WHERE id = %(id)s", {"id": product})
                        conn.exec_driver_sql("COMMIT")
                    else:
                        product = rng.choice(self.existing)
                        conn.exec_driver_sql(
                            "UPDATE products SET name = %(n)s, stock = stock + 1 WHERE id = %(id)s",
                            {"n": f"{HOSTILE[n % len(HOSTILE)]} upd {n}", "id": product},
                        )
                    self.log.append((commit_position(self.kind, conn), product))
                    self.stop.wait(0.005)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            engine.dispose()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any, kind: str) -> Iterator[Shop]:
    shop = make_shop(kind, tmp_path / "shop", services, products=2000)
    shop.reindex(spark)  # v1; its catch-up hands the alias to the default group
    yield shop
    drop_shop(kind, shop, services)


def _position(shop: Shop, group: str) -> int:
    store = CoordinationStore(shop.pipeline.coordination_url())
    try:
        return store.offsets.offsets(group)["products"].position
    finally:
        store.close()


def test_changes_committed_during_a_reindex_are_in_the_new_index(shop: Shop, spark: Any, kind: str) -> None:
    writer = Writer(shop, 2000, kind)
    writer.start()
    try:
        wait_until(lambda: len(writer.log) > 20, 120, "the writer to commit")
        started = len(writer.log)
        shop.reindex(spark)  # v2, rebuilt under the writer
    finally:
        writer.stop.set()
        writer.join(timeout=60)
    assert writer.error is None
    during = len(writer.log) - started
    assert during > 100, "the writer must have committed throughout the reindex"
    pc = _position(shop, "default")  # where the catch-up stopped and the live sync continues
    after = {product for position, product in writer.log if position > pc}
    before = [product for position, product in writer.log[started:] if position <= pc]
    assert len(before) > during // 2, "most changes made during the reindex were caught up before the swap"
    report = shop.verify()
    drift = report.missing + report.extra + report.stale
    assert report.duplicates == 0
    assert drift <= len(after), report.to_dict()
    for kind in ("missing", "extra", "stale"):
        assert set(report.samples[kind]) <= {str(p) for p in after}, (kind, report.to_dict())
    # the live sync continues from Pc: nothing lost between the catch-up and the swap
    summary = shop.sync(spark)
    commits_after = sum(1 for position, _ in writer.log if position > pc)
    assert summary.applied + summary.deleted <= commits_after  # only the tail after Pc is left
    final = shop.verify()
    assert final.clean, final.to_dict()


def test_a_live_sync_is_paused_for_the_swap_and_continues_on_the_new_version(
    shop: Shop, spark: Any, cli: Path, kind: str
) -> None:
    """A sync runs throughout: the reindex holds the alias, the sync pauses and reports where it
    is, the new version is caught up past that, swapped, and the sync continues on it."""
    sync = LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs", start_new_session=True
    )
    writer = Writer(shop, 2000, kind)
    try:
        writer.start()

        def position_reached(position: int) -> bool:
            sync.assert_running("the live sync")
            return _position(shop, "default") >= position

        wait_until(lambda: position_reached(1) and len(writer.log) > 50, 300, "the live sync to run")
        shop.reindex(spark)  # v2 under the writer and the live sync
        writer.stop.set()
        writer.join(timeout=60)
        assert writer.error is None
        last = writer.log[-1][0]
        wait_until(lambda: position_reached(last), 300, "the live sync to apply the last commit")
        report = shop.verify()
        assert report.clean, report.to_dict()
        sync.send_signal(signal.SIGTERM)
        _, err = sync.communicate(timeout=120)
        assert sync.returncode == 0, err[-3000:]
    finally:
        writer.stop.set()
        if sync.poll() is None:
            os.killpg(sync.pid, signal.SIGKILL)
