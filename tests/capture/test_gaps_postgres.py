"""No silent gap on PostgreSQL, in the situations operators create: a slot dropped by hand (or
created again at the head), two databases of one server behind one coordination store, a sync
stopped by SIGTERM in the middle of its work. Each ends with verify clean, or with a non-zero
exit that names the gap; never with exit 0 and the index behind."""

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
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import LogGap
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.verify.local import verify_alias
from sparkindex.verify.verifier import VerifyReport
from tests.capture.helpers import HOSTILE, Shop, drop_pg_shop, make_pg_shop, slot_of, wait_until
from tests.capture.test_sync_process import Writer
from tests.cli_process import LoggedProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "shop", services["postgres"], products=300)
    shop.reindex(spark)
    first = shop.sync(spark)
    assert first.reconciled == {}  # the reindex handed its position over: no gap
    yield shop
    drop_pg_shop(shop, services["postgres"])


def _cli_sync(cli: Path, config: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cli), "sync", "-c", str(config), "--until-caught-up", "--json", *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _changes_in_the_gap(shop: Shop, tag: str) -> None:
    """Updates (hostile text), a delete and an insert: stale, extra and missing documents."""
    shop.sql(
        "UPDATE products SET name = :n || ' ' || id WHERE id % 3 = 0",
        "DELETE FROM reviews WHERE product_id = 10",
        "DELETE FROM products WHERE id = 10",
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
        "VALUES (:new, :n, 'd', 1.0, 1, 1, '2026-01-01 00:00:00')",
        params={"n": f"{HOSTILE[0]} {tag}", "new": 900_000 + len(tag)},
    )


def _drop_slot(shop: Shop, name: str) -> None:
    with shop.engine().connect() as conn:
        conn.execute(sa.text("SELECT pg_drop_replication_slot(:s)"), {"s": name})


def test_a_dropped_slot_is_refused_with_on_gap_fail_then_reconciled(shop: Shop, spark: Any, cli: Path) -> None:
    slot = slot_of(shop, "default")
    _changes_in_the_gap(shop, "before the drop")
    _drop_slot(shop, slot)  # an administrator, a failover, another pipeline's --drop-slot
    _changes_in_the_gap(shop, "after the drop")
    config = shop.directory / "pipeline.yaml"

    refused = _cli_sync(cli, config, "--on-gap", "fail")
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    message = " ".join(refused.stderr.split())
    assert slot in message and "'products'" in message and "does not exist" in message, message[-2000:]
    assert "--on-gap reconcile" in message  # the command that repairs it
    assert not shop.verify().clean  # nothing was applied: the index is still behind, and said so

    healed = _cli_sync(cli, config)
    assert healed.returncode == 0, healed.stderr[-3000:]
    summary = orjson.loads(healed.stdout.strip().splitlines()[-1])
    found = summary["reconciled"]["products"]
    assert found["stale"] >= 100 and found["missing"] >= 1 and found["extra"] >= 1, found
    assert "reconciled" in healed.stderr
    report = shop.verify()
    assert report.clean, report.to_dict()

    # the stream goes on from the new slot: a later change arrives through the log, no reconcile
    shop.sql("UPDATE products SET name = :n WHERE id = 7", params={"n": HOSTILE[2]})
    after = shop.sync(spark)
    assert after.reconciled == {} and after.applied == 1
    assert shop.document("7")["name"] == HOSTILE[2]  # type: ignore[index]


def test_a_slot_created_again_at_the_head_is_a_gap(shop: Shop, spark: Any) -> None:
    """Someone drops the slot and creates one of the same name: it exists, it is in this database,
    but it starts at the head of the WAL, past the stored position."""
    slot = slot_of(shop, "default")
    _changes_in_the_gap(shop, "lost")
    _drop_slot(shop, slot)
    with shop.engine().connect() as conn:
        conn.execute(sa.text("SELECT pg_create_logical_replication_slot(:s, 'wal2json')"), {"s": slot})
    shop.pipeline.sync.on_gap = "fail"
    with pytest.raises(LogGap) as info:
        shop.sync(spark)
    assert "past the stored position" in str(info.value)
    shop.pipeline.sync.on_gap = "reconcile"
    summary = shop.sync(spark)
    assert summary.reconciled["products"]["stale"] >= 100, summary.reconciled
    report = shop.verify()
    assert report.clean, report.to_dict()


def test_a_slot_dropped_while_the_sync_runs_is_healed(shop: Shop, cli: Path) -> None:
    """The slot disappears under a running sync: the next read fails, the sync finds the gap,
    reconciles and goes on streaming; nothing is skipped."""
    proc = LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs", start_new_session=True
    )
    writer = Writer(shop)
    try:
        writer.start()
        wait_until(lambda: proc.assert_running("sync") and _applied(shop) > 0, 300, "a first acknowledged batch")
        _terminate_slot_readers(shop)
        _drop_slot_when_free(shop, slot_of(shop, "default"))
        wait_until(lambda: proc.assert_running("sync") and "reconciled" in proc.stderr_text(), 300, "reconcile")
        writer.stop.set()
        writer.join(timeout=60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
    finally:
        writer.stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert writer.error is None
    done = _cli_sync(cli, shop.directory / "pipeline.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    report = shop.verify()
    assert report.clean, report.to_dict()


def _applied(shop: Shop) -> int:
    from sparkindex.coordination.store import CoordinationStore

    store = CoordinationStore(shop.pipeline.coordination_url())
    try:
        saved = store.offsets.offsets("default")
    finally:
        store.close()
    return saved["products"].applied if "products" in saved else 0


def _terminate_slot_readers(shop: Shop) -> None:
    with shop.engine().connect() as conn:
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = :s "
                "AND active_pid IS NOT NULL"
            ),
            {"s": slot_of(shop, "default")},
        )


def _drop_slot_when_free(shop: Shop, slot: str) -> None:
    """A slot in use cannot be dropped: retry until the reader lets go between two reads."""
    deadline = time.monotonic() + 60
    while True:
        try:
            _drop_slot(shop, slot)
            return
        except sa.exc.DBAPIError:
            if time.monotonic() > deadline:
                raise
            _terminate_slot_readers(shop)


@pytest.mark.parametrize("whom", ["process", "group"])
def test_sigterm_during_a_batch_stops_cleanly_and_the_next_sync_delivers_it(shop: Shop, cli: Path, whom: str) -> None:
    """SIGTERM as `timeout`/Kubernetes send it (the process) and as systemd does (the whole group,
    Spark's JVM included): exit 0 within 30 s, no traceback, and nothing lost."""
    proc = LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs", start_new_session=True
    )
    writer = Writer(shop)
    try:
        writer.start()
        wait_until(lambda: proc.assert_running("sync") and _applied(shop) > 0, 300, "a first acknowledged batch")
        applied = _applied(shop)
        wait_until(lambda: proc.assert_running("sync") and _applied(shop) > applied, 120, "a batch under way")
        if whom == "group":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        writer.stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    writer.join(timeout=60)
    assert writer.error is None
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "Py4J" not in err, err[-3000:]
    assert took < 30, took
    assert "applied" in err  # the summary was printed
    done = _cli_sync(cli, shop.directory / "pipeline.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    assert orjson.loads(done.stdout.strip().splitlines()[-1])["reconciled"] == {}
    report = shop.verify()
    assert report.clean, report.to_dict()


# -- two databases on one server, one coordination store -------------------------------------------
def _verify(directory: Path, alias: str) -> VerifyReport:
    pipeline = load_pipeline(directory / "pipeline.yaml")
    source = open_source(pipeline.source_url())
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    try:
        [(plan, _)] = resolve_plans(pipeline, source, [alias]).values()
        return verify_alias(source, target, plan)
    finally:
        source.close()


def test_two_databases_on_one_server_with_one_store_and_group_default(
    tmp_path: Path, services: dict[str, str], spark: Any, cli: Path
) -> None:
    """The same slot prefix and group in both pipelines and one coordination store: before slots
    carried the database, the second pipeline read a slot of the first database and retried for
    ever; and one sync lock per group kept the two from running at once."""
    import uuid

    store_prefix = f"t{uuid.uuid4().hex[:8]}_"
    coordination = f"coordination:\n  url: {services['postgres']}\n  prefix: {store_prefix}\n"
    shops: list[Shop] = []
    try:
        for n, alias in enumerate(["products", "products_b"]):
            shop = make_pg_shop(tmp_path / f"shop{n}", services["postgres"], products=150)
            if shops:  # the same slot prefix as the first pipeline: only the database tells them apart
                shop.slot = shops[0].slot
            path = shop.directory / "pipeline.yaml"
            text = path.read_text(encoding="utf-8")
            text = text.replace("coordination:\n  url: sqlite:///.sparkindex/state.db\n", coordination)
            text = text.replace("alias: products", f"alias: {alias}").replace(
                f"slot: {make_slot(text)}", f"slot: {shop.slot}"
            )
            path.write_text(text, encoding="utf-8")
            shop.pipeline = load_pipeline(path)
            shops.append(shop)
        for shop in shops:
            shop.reindex(spark)
        for n, shop in enumerate(shops):
            _changes_in_the_gap(shop, f"db{n}")
        procs = [
            LoggedProcess(
                [str(cli), "sync", "-c", str(s.directory / "pipeline.yaml"), "--until-caught-up", "--json"],
                s.directory / "logs",
                start_new_session=True,
            )
            for s in shops
        ]
        try:
            for proc in procs:
                out, err = proc.communicate(timeout=600)
                assert proc.returncode == 0, err[-3000:]
                summary = orjson.loads(out.strip().splitlines()[-1])
                assert summary["applied"] >= 40 and summary["reconciled"] == {}, summary
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        for shop, alias in zip(shops, ["products", "products_b"], strict=True):
            report = _verify(shop.directory, alias)
            assert report.clean, report.to_dict()
        with shops[0].engine().connect() as conn:
            slots = {
                r[0]: r[1]
                for r in conn.execute(
                    sa.text("SELECT slot_name, database FROM pg_replication_slots WHERE slot_name LIKE :p"),
                    {"p": f"{shops[0].slot}%"},
                )
            }
        databases = {str(sa.make_url(s.url).database) for s in shops}
        live = {name: db for name, db in slots.items() if "_default_" in name}
        assert set(live.values()) == databases and len(live) == 2, slots  # one slot per database
    finally:
        for shop in shops:
            drop_pg_shop(shop, services["postgres"])
        from sparkindex.coordination.engine import make_engine

        engine = make_engine(services["postgres"])
        with engine.begin() as conn:
            for (name,) in conn.execute(
                sa.text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"), {"p": f"{store_prefix}%"}
            ).fetchall():
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}" CASCADE'))
        engine.dispose()


def make_slot(text: str) -> str:
    """The slot prefix a pipeline file names."""
    for line in text.splitlines():
        if line.strip().startswith("slot:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no slot in the pipeline")


def test_a_slot_named_the_old_way_is_adopted_with_its_position(shop: Shop, spark: Any) -> None:
    """An install from before slots carried the database and namespace has `<prefix>_<group>`:
    the first sync adopts it (same position: the changes since arrive through the log, no
    reconcile) and leaves no slot behind."""
    from sparkindex.sources.postgres.slots import legacy_slot_name

    slot, legacy = slot_of(shop, "default"), legacy_slot_name(shop.pipeline.sync.slot, "default")
    with shop.engine().connect() as conn:  # the old install's slot, at the stored position
        conn.execute(sa.text("SELECT pg_copy_logical_replication_slot(:s, :l)"), {"s": slot, "l": legacy})
        conn.execute(sa.text("SELECT pg_drop_replication_slot(:s)"), {"s": slot})
    shop.sql("UPDATE products SET name = :n WHERE id <= 5", params={"n": HOSTILE[3]})
    summary = shop.sync(spark)
    assert summary.reconciled == {} and summary.applied == 5, summary
    with shop.engine().connect() as conn:
        names = {r[0] for r in conn.execute(sa.text("SELECT slot_name FROM pg_replication_slots"))}
    assert slot in names and legacy not in names
    assert shop.document("3")["name"] == HOSTILE[3]  # type: ignore[index]
