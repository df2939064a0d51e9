"""`sparkindex sync` as a process: killed with SIGKILL mid-stream it resumes from the last
acknowledged position and loses nothing; SIGTERM and `sparkindex stop` end it cleanly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.coordination.store import CoordinationStore
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, wait_until
from tests.cli_process import LoggedProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"])
    shop.reindex(spark)
    shop.sync(spark)  # the slot exists from here on
    yield shop
    drop_pg_shop(shop, services["postgres"])


def _start_sync(cli: Path, shop: Shop, *extra: str) -> LoggedProcess:
    return LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), *extra],
        shop.directory / "logs",
        start_new_session=True,  # its JVM shares the process group: a SIGKILL takes both
    )


def _applied(shop: Shop) -> int:
    store = CoordinationStore(shop.pipeline.coordination_url())
    offsets = store.offsets.offsets("default")
    store.close()
    return offsets["products"].applied if "products" in offsets else 0


class Writer(threading.Thread):
    """Commits one update per transaction until stopped; remembers every row it touched."""

    def __init__(self, shop: Shop) -> None:
        super().__init__(daemon=True)
        self.shop = shop
        self.stop = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(3)
        engine = self.shop.engine()
        try:
            with engine.connect() as conn:
                while not self.stop.is_set() and self.commits < 100_000:
                    conn.exec_driver_sql(
                        "UPDATE products SET name = %(n)s WHERE id = %(id)s",
                        {"n": f"{HOSTILE[self.commits % len(HOSTILE)]} #{self.commits}", "id": rng.randint(1, 200)},
                    )
                    self.commits += 1
                    self.stop.wait(0.002)  # a steady stream, not a burst
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            engine.dispose()


def test_sigkill_mid_stream_then_resume_loses_nothing(shop: Shop, cli: Path) -> None:
    proc = _start_sync(cli, shop)
    writer = Writer(shop)
    try:
        writer.start()
        wait_until(
            lambda: proc.assert_running("sync") and _applied(shop) > 0, 300, "the running sync to acknowledge a batch"
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        killed_at = writer.commits
        wait_until(lambda: writer.commits > killed_at + 200, 120, "more commits after the kill")
    finally:
        writer.stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    writer.join(timeout=60)
    assert writer.error is None
    applied_before = _applied(shop)
    done = subprocess.run(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml"), "--until-caught-up", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert {"applied", "deleted", "position", "lag_s"} <= set(summary)
    assert summary["applied"] > 0  # the commits after the kill
    assert _applied(shop) == applied_before + summary["applied"]
    report = shop.verify()
    assert report.clean, report.to_dict()


@pytest.mark.parametrize("how", ["sigterm", "stop"])
def test_sync_stops_cleanly(shop: Shop, cli: Path, how: str) -> None:
    proc = _start_sync(cli, shop)
    try:
        shop.sql("UPDATE products SET name = :n WHERE id = 42", params={"n": HOSTILE[5]})
        wait_until(
            lambda: proc.assert_running("sync") and (shop.document("42") or {}).get("name") == HOSTILE[5],
            300,
            "the running sync to apply the update",
        )
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            stopped = subprocess.run(
                [str(cli), "stop", "-c", str(shop.directory / "pipeline.yaml")], capture_output=True, text=True
            )
            assert stopped.returncode == 0, stopped.stderr
            assert "stopping" in stopped.stderr
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert "1 applied" in err or "applied" in err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # what it acknowledged is kept: a rerun has nothing left to apply for that update
    assert _applied(shop) >= 1
