"""Upgrading a store left by the sparkindex of commit ed93f79 (schema version 9) to one schema regime.

That version created its core tables through versioned migrations, and eleven more on first use
(change capture's offsets, version ledger, snapshots, deferred runs, holds, presence and
hand-overs; sync events and gaps; verify runs; dead-letter resolutions), outside the version.
Three stores of that version, on every store kind: one where none of those tables exists yet, one
where they exist as that version made them, and one where they exist in the older shapes that
version still accepted (columns added later missing, the deferred-run table of its first release,
the gap table not there yet). Opening the store with this version must migrate each in place:
every table of the current schema there with every column, the schema at the current version,
and every row kept and readable through the store's concept modules, then writable.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.records import DeadLetter
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import SCHEMA_VERSION, make_tables
from sparkindex.coordination.verify_runs import COUNTS, VerifyRun
from tests.coordination.legacy_v9 import make_first_use, make_v9_core

JOB = "11111111-2222-3333-4444-555555555555"
PARTITIONS = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(3)]
FIRST_USE = (
    "sync_offset",
    "doc_version",
    "change_snapshot",
    "deferred_run",
    "sync_hold",
    "sync_presence",
    "reindex_handover",
    "sync_event",
    "sync_gap",
    "verify_run",
    "dead_letter_resolved",
)
SHAPES = ["absent", "as_left", "old"]


def columns(engine: sa.Engine, table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(table)}


def build_v9_store(url: str, prefix: str, shape: str, now: float) -> None:
    """The store as ed93f79 leaves it: its core at version 9 with a running job, and the
    first-use tables absent, as that version made them (``as_left``), or older (``old``)."""
    engine = make_engine(url)
    try:
        core = make_v9_core(prefix)
        core.metadata.create_all(engine)
        common: dict[str, Any] = {
            "job_id": JOB,
            "entity": "products",
            "range_start": None,
            "range_end": None,
            "estimated_count": 10,
            "work_units": 10,
            "priority": 0,
            "cursor": None,
            "processed_count": 0,
            "success_count": 0,
            "failed_count": 0,
            "owner": None,
            "writer": None,
            "run_id": None,
            "claim_token": 0,
            "claims": 0,
            "closed_count": 0,
            "retry_count": 0,
            "update_errors": 0,
        }
        with engine.begin() as conn:
            conn.execute(core.schema.insert().values(id=1, version=9, upgraded_at=now - 86400))
            conn.execute(
                core.job.insert().values(
                    id=JOB,
                    alias_key="products",
                    status="RUNNING",
                    config_json="{}",
                    targets_json='{"products": "products_v2"}',
                    created_at=now - 600,
                    updated_at=now - 60,
                    partition_not_found=0,
                )
            )
            conn.execute(
                core.partition.insert(),
                [
                    {**common, "id": PARTITIONS[0], "partition_index": 0, "status": "COMPLETED", "cursor": "[9]"},
                    {**common, "id": PARTITIONS[1], "partition_index": 1, "status": "PROCESSING", "claim_token": 3},
                    {**common, "id": PARTITIONS[2], "partition_index": 2, "status": "PENDING"},
                ],
            )
            conn.execute(
                core.dead_letter.insert().values(
                    alias="products",
                    doc_id="5",
                    job_id=JOB,
                    partition_id=PARTITIONS[0],
                    error_class="MapperParsingError",
                    error_message="bad price",
                    attempts=1,
                    first_seen=now - 500,
                    last_seen=now - 500,
                )
            )
        if shape == "absent":
            return
        old = shape == "old"
        md = make_first_use(prefix, old=old, dialect=engine.dialect.name)
        md.create_all(engine)
        t = md.tables
        p = f"{prefix}si_"
        with engine.begin() as conn:
            offset: dict[str, Any] = {
                "group_name": "g",
                "alias": "products",
                "position": 42,
                "offset_json": '{"lsn": 42}',
                "index_name": "products_v1",
                "applied": 10,
                "deleted": 2,
                "lag_s": 1.5,
                "updated_at": now - 10,
            }
            conn.execute(t[f"{p}sync_offset"].insert().values(**offset, **({} if old else {"retained_bytes": 4096})))
            conn.execute(
                t[f"{p}doc_version"].insert(),
                [
                    {"index_name": "products_v1", "doc_id": "7", "version": 3, "updated_at": now},
                    {"index_name": "products_v1", "doc_id": "8", "version": 5, "updated_at": now},
                ],
            )
            conn.execute(
                t[f"{p}change_snapshot"]
                .insert()
                .values(
                    alias="products",
                    tbl="reviews",
                    row_key="[1]",
                    images='[{"id": 1, "product_id": 7}]',
                    position=40,
                    recorded_at=now - 5,
                )
            )
            run = {"ran_on": "2024-01-01", "ran_at": now - 3600} if old else {"started_at": now - 3600}
            conn.execute(t[f"{p}deferred_run"].insert().values(alias="products", **run))
            hold = {"alias": "products", "holder": "reindex:j1:a", "since": now - 60, "paused_at": 41}
            lease = {} if old else {"expires_at": now + 600}
            conn.execute(t[f"{p}sync_hold"].insert().values(**hold, paused_by="sync-a", **lease))
            conn.execute(
                t[f"{p}sync_presence"]
                .insert()
                .values(
                    group_name="g",
                    alias="products",
                    holder="sync-a",
                    since=now - 60,
                    expires_at=now + 600,
                    paused_for="reindex:j1:a",
                    paused_at=41,
                )
            )
            conn.execute(
                t[f"{p}reindex_handover"]
                .insert()
                .values(job_id="j1", alias="products", index_name="products_v2", start_position=30, start_json="{}")
            )
            conn.execute(
                t[f"{p}sync_event"]
                .insert()
                .values(group_name="g", kind="source", times=3, last_at=now - 20, message="connection refused")
            )
            if not old:
                conn.execute(
                    t[f"{p}sync_gap"]
                    .insert()
                    .values(
                        gap_id="gap-1",
                        group_name="g",
                        alias="products",
                        found_at=now - 30,
                        reason="slot gone",
                        stored=12,
                        available=20,
                        outcome="reconciled",
                        ended_at=now - 25,
                        position=20,
                        found_json='{"missing": 1}',
                    )
                )
            conn.execute(
                t[f"{p}verify_run"]
                .insert()
                .values(
                    run_id="r1",
                    alias="products",
                    index_name="products_v1",
                    trigger="cli",
                    repair=False,
                    status="drift",
                    **{c: 0 for c in COUNTS},
                    started_at=now - 100,
                    finished_at=now - 90,
                    report_json='{"samples": {"missing": ["3"]}}',
                )
            )
            conn.execute(
                t[f"{p}dead_letter_resolved"]
                .insert()
                .values(
                    alias="products",
                    doc_id="9",
                    job_id=JOB,
                    error_class="E",
                    error_message="was bad",
                    attempts=2,
                    first_seen=now - 900,
                    last_seen=now - 800,
                    resolved_at=now - 700,
                    resolution="redriven",
                )
            )
    finally:
        engine.dispose()


def assert_current_schema(engine: sa.Engine, prefix: str) -> None:
    """Every table of the current schema is there with every column, at the current version."""
    expected = make_first_use(prefix)  # the first-use tables as ed93f79 defined them, at least
    for name in FIRST_USE:
        table = f"{prefix}si_{name}"
        assert sa.inspect(engine).has_table(table), f"{table} was not created by the upgrade"
        missing = {c.name for c in expected.tables[table].columns} - columns(engine, table)
        assert not missing, f"{table} lacks {sorted(missing)} after the upgrade"
    for table in make_tables(prefix).metadata.sorted_tables:
        assert sa.inspect(engine).has_table(table.name), table.name
        assert {c.name for c in table.columns} <= columns(engine, table.name), table.name
    st = make_tables(prefix).schema
    with engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(sa.select(st.c.id, st.c.version))] == [(1, SCHEMA_VERSION)]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_v9_store_is_migrated_in_place_and_keeps_its_rows(store_url: tuple[str, str], shape: str) -> None:
    url, prefix = store_url
    now = time.time()
    build_v9_store(url, prefix, shape, now)

    store = CoordinationStore(url, prefix)
    try:
        assert SCHEMA_VERSION == 11
        assert_current_schema(store.engine, prefix)
        # the core's rows, untouched by the new migration
        assert store.job_rows.job(JOB).targets == {"products": "products_v2"}
        assert [
            p.id for p in sorted(store.partition_rows.partitions(JOB), key=lambda p: p.partition_index)
        ] == PARTITIONS
        assert [d.doc_id for d in store.dead_letters.list()] == ["5"]
        events = store.sync_events
        runs = store.verify_runs

        if shape != "absent":  # the first-use tables' rows, read through the store's concept modules
            [group] = store.offsets.every_group()
            assert (group.group, group.alias, group.position, group.offset, group.index) == (
                "g",
                "products",
                42,
                {"lsn": 42},
                "products_v1",
            )
            assert (group.applied, group.deleted, group.lag_s) == (10, 2, 1.5)
            assert group.retained_bytes == (None if shape == "old" else 4096)
            assert store.ledger.versions("products_v1", ["7", "8", "9"]) == {"7": 3, "8": 5}
            [deferred] = store.deferred_changes.deferred("products")
            assert (deferred.table, deferred.row_key, deferred.images, deferred.position) == (
                "reviews",
                "[1]",
                [{"id": 1, "product_id": 7}],
                40,
            )
            assert store.deferred_runs.last_deferred_run(["products"]) == pytest.approx(now - 3600)
            [hold] = store.sync_holds.holds(["products"]).values()  # a hold of before the lease is live
            assert (hold.holder, hold.paused_at, hold.paused_by) == ("reindex:j1:a", 41, "sync-a")
            assert hold.expires_at == (None if shape == "old" else pytest.approx(now + 600))
            [presence] = store.sync_holds.presence(["products"])
            assert (presence.group, presence.holder, presence.paused_for, presence.paused_at) == (
                "g",
                "sync-a",
                "reindex:j1:a",
                41,
            )
            assert store.sync_holds.starts("j1") == {"products": (30, {})}
            [event] = events.events("g")
            assert (event.kind, event.count, event.message) == ("source", 3, "connection refused")
            gaps = events.gaps("g")
            assert [(g.gap_id, g.outcome, g.found) for g in gaps] == (
                [] if shape == "old" else [("gap-1", "reconciled", {"missing": 1})]
            )
            latest = runs.latest("products")
            assert latest is not None and (latest.run_id, latest.status) == ("r1", "drift")
            assert latest.report == {"samples": {"missing": ["3"]}}
            [resolved] = store.dead_letters.resolved()
            assert (resolved.letter.doc_id, resolved.letter.attempts, resolved.resolution) == ("9", 2, "redriven")

        # and every table takes the writes this version makes
        store.offsets.save("g", {"products": (50, {"lsn": 50}, "products_v2")}, {"products": (1, 0)}, 0.5, 8192)
        assert store.offsets.offsets("g")["products"].retained_bytes == 8192
        store.ledger.record_versions("products_v2", {"7": 4})
        assert store.ledger.versions("products_v2", ["7"]) == {"7": 4}
        store.deferred_changes.defer("products", [("reviews", "[2]", [{"id": 2}], 51)])
        assert [d.row_key for d in store.deferred_changes.deferred("products")][-1] == "[2]"
        store.deferred_runs.record_deferred_run(["products", "reviews"], now)
        assert store.deferred_runs.last_deferred_run(["products", "reviews"]) == pytest.approx(now)
        store.sync_holds.hold("reviews", "reindex:j2:b", ttl_s=30.0)
        assert store.sync_holds.holds(["reviews"])["reviews"].expires_at is not None
        store.sync_holds.record_swap("j1", "products", "products_v2", 4)
        assert store.sync_holds.swaps("j1") == {"products": "products_v2"}
        store.sync_holds.announce("g", ["reviews"], "sync-b", ttl_s=30.0)
        assert store.sync_holds.serving(["reviews"]) == {"reviews": ["sync-b"]}
        events.record("g", "apply", "bulk refused")
        gap = events.gap_found("g", "products", "binlog purged", 1, 2)
        events.gap_ended(gap, "refused", detail="on_gap: fail")
        assert any(g.gap_id == gap and g.outcome == "refused" for g in events.gaps("g"))
        zero: dict[str, Any] = dict.fromkeys(COUNTS, 0)
        runs.record(
            [VerifyRun("r2", "products", None, "scheduled", True, "clean", **zero, started_at=now, finished_at=now)]
        )
        latest = runs.latest("products")
        assert latest is not None and (latest.run_id, latest.repair) == ("r2", True)
        [letter] = store.dead_letters.list()
        assert store.dead_letters.resolve([letter], "gone") == 1
        assert sorted(r.letter.doc_id for r in store.dead_letters.resolved()) == (
            ["5"] if shape == "absent" else ["5", "9"]
        )
    finally:
        store.close()

    # opening the migrated store again applies nothing twice and keeps what is there
    again = CoordinationStore(url, prefix)
    try:
        assert_current_schema(again.engine, prefix)
        assert again.offsets.offsets("g")["products"].position == 50
        assert again.deferred_runs.last_deferred_run(["products", "reviews"]) == pytest.approx(now)
        assert again.ledger.versions("products_v2", ["7"]) == {"7": 4}
        assert isinstance(again.dead_letters.resolved()[0].letter, DeadLetter)
    finally:
        again.close()


def test_openers_racing_on_a_v9_store_all_succeed(store_url: tuple[str, str]) -> None:
    """Several processes starting at once on a store of the version before: one migrates, the
    others wait for it (the version row's lock; SQLite's write lock) or find each step done."""
    url, prefix = store_url
    now = time.time()
    build_v9_store(url, prefix, "old", now)
    start = threading.Barrier(4)

    def open_store(_: int) -> int:
        start.wait()
        store = CoordinationStore(url, prefix)
        try:
            return len(store.offsets.every_group())
        finally:
            store.close()

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(open_store, range(4))) == [1, 1, 1, 1]
    engine = make_engine(url)
    try:
        assert_current_schema(engine, prefix)
    finally:
        engine.dispose()
