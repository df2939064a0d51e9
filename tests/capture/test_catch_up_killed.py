"""A reindex SIGKILLed while its holds pause a live sync: the sync carries on by itself once the
hold's lease runs out (nobody renews it), and a rerun of the reindex finishes the job."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.coordination.holds import HOLD_TTL_S
from sparkindex.coordination.store import CoordinationStore
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, wait_until
from tests.cli_process import LoggedProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=2000)
    shop.reindex(spark)
    yield shop
    drop_pg_shop(shop, services["postgres"])


#: A second sync of the alias, as the store sees one (its presence), that never answers a hold: the
#: reindex waits for it to pause (PAUSE_TIMEOUT_S), holding the alias with the live sync paused, so
#: the kill lands in that wait on any machine; its own hand-over takes a few hundred ms.
SILENT_GROUP, SILENT_SYNC = "never-pauses", "sync-that-never-pauses"


def test_a_reindex_killed_while_holding_leaves_the_sync_paused_one_lease_at_most(shop: Shop, cli: Path) -> None:
    pipeline = str(shop.directory / "pipeline.yaml")
    store = CoordinationStore(shop.pipeline.coordination_url())
    offsets = store.sync_holds
    sync = LoggedProcess([str(cli), "sync", "-c", pipeline], shop.directory / "logs", start_new_session=True)
    reindex: LoggedProcess | None = None
    try:
        shop.sql("UPDATE products SET name = :n WHERE id = 1", params={"n": HOSTILE[0]})
        wait_until(
            lambda: sync.assert_running("sync") and (shop.document("1") or {}).get("name") == HOSTILE[0],
            300,
            "the live sync to run",
        )
        offsets.announce(SILENT_GROUP, ["products"], SILENT_SYNC, 900.0)  # outlives the waits below
        reindex = LoggedProcess(
            [str(cli), "reindex", "-c", pipeline, "--json"], shop.directory / "logs", start_new_session=True
        )

        def paused() -> bool:
            assert reindex is not None
            reindex.assert_running("the reindex")
            hold = offsets.holds(["products"]).get("products")
            return hold is not None and hold.paused_by is not None

        wait_until(paused, 600, "the reindex to hold the alias and the sync to pause")
        os.killpg(reindex.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        reindex.wait(timeout=60)
        killed_at = time.monotonic()
        offsets.retire(SILENT_GROUP, SILENT_SYNC)  # the rerun below waits for the live sync alone
        assert "products" in offsets.holds(["products"]), "the kill must land while the alias is held"

        # held: the sync does not apply what commits now, for as long as the hold lives...
        shop.sql("UPDATE products SET name = :n WHERE id = 2", params={"n": HOSTILE[1]})
        held_looks = 0

        def lease_ran_out() -> bool:
            nonlocal held_looks
            applied = (shop.document("2") or {}).get("name") == HOSTILE[1]  # read before the hold is
            if "products" not in offsets.holds(["products"]):
                return True
            assert not applied, "the sync applied a change while the alias was held"
            held_looks += 1
            return False

        # ...until the lease runs out, with nobody left to renew it
        wait_until(lease_ran_out, HOLD_TTL_S + 15, "the hold's lease to run out")
        assert time.monotonic() - killed_at <= HOLD_TTL_S + 15
        assert held_looks > 0, "the change must have been looked for while the alias was held"
        wait_until(
            lambda: sync.assert_running("sync") and (shop.document("2") or {}).get("name") == HOSTILE[1],
            120,
            "the sync to carry on",
        )

        rerun = subprocess.run(
            [str(cli), "reindex", "-c", pipeline, "--json"], capture_output=True, text=True, timeout=900
        )
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert orjson.loads(rerun.stdout.strip().splitlines()[-1])["status"] == "COMPLETED"
        assert offsets.holds(["products"]) == {}
        shop.sql("UPDATE products SET name = :n WHERE id = 3", params={"n": HOSTILE[2]})
        wait_until(
            lambda: sync.assert_running("sync") and (shop.document("3") or {}).get("name") == HOSTILE[2],
            120,
            "the sync to continue on the rebuilt version",
        )
        report = shop.verify()
        assert report.clean, report.to_dict()
        sync.send_signal(signal.SIGTERM)
        _, err = sync.communicate(timeout=120)
        assert sync.returncode == 0, err[-3000:]
    finally:
        if reindex is not None and reindex.poll() is None:
            reindex.kill_group()
        if sync.poll() is None:
            sync.kill_group()
        offsets.retire(SILENT_GROUP, SILENT_SYNC)
        store.close()
