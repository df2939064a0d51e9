"""Schema versioning on every store: a v1 store is upgraded in place, a newer one is refused."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import SCHEMA_VERSION, make_tables
from sparkindex.coordination.write_ahead import Written
from sparkindex.errors import PermanentError

P = PartitionStatus


def schema_version(engine: sa.Engine, prefix: str) -> list[tuple[int, int]]:
    st = make_tables(prefix).schema
    with engine.connect() as conn:
        return [(r.id, r.version) for r in conn.execute(sa.select(st.c.id, st.c.version))]


def table_columns(engine: sa.Engine, table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(table)}


def partition_columns(engine: sa.Engine, prefix: str) -> set[str]:
    return table_columns(engine, make_tables(prefix).partition.name)


def create_v1_store(url: str, prefix: str) -> tuple[str, dict[int, str]]:
    """Today's tables minus what versions 2 and 4-9 added (``partition.writer``,
    ``job.fingerprint``, ``dead_letter.attempt_key``, ``partition.bulk_latency``,
    ``partition.stages``, ``partition.update_errors``, ``job.partition_not_found``, the
    ``write_ahead`` and ``swap_attempt`` tables), versioned 1, holding a job and three partitions."""
    engine = make_engine(url)
    try:
        t = make_tables(prefix)
        t.metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE {t.partition.name} DROP COLUMN writer"))
            conn.execute(sa.text(f"ALTER TABLE {t.job.name} DROP COLUMN fingerprint"))
            conn.execute(sa.text(f"ALTER TABLE {t.dead_letter.name} DROP COLUMN attempt_key"))
            conn.execute(sa.text(f"ALTER TABLE {t.partition.name} DROP COLUMN bulk_latency"))
            conn.execute(sa.text(f"ALTER TABLE {t.partition.name} DROP COLUMN stages"))
            conn.execute(sa.text(f"ALTER TABLE {t.partition.name} DROP COLUMN update_errors"))
            conn.execute(sa.text(f"ALTER TABLE {t.job.name} DROP COLUMN partition_not_found"))
        t.write_ahead.drop(engine)
        t.swap_attempt.drop(engine)
        assert not sa.inspect(engine).has_table(t.write_ahead.name)
        assert not sa.inspect(engine).has_table(t.swap_attempt.name)
        assert "writer" not in partition_columns(engine, prefix)
        v1_job = sa.Table(t.job.name, sa.MetaData(), autoload_with=engine)
        v1_partition = sa.Table(t.partition.name, sa.MetaData(), autoload_with=engine)
        now = time.time()
        job_id = "11111111-2222-3333-4444-555555555555"
        ids = {i: f"00000000-0000-0000-0000-00000000000{i}" for i in range(3)}
        # a reflected table knows no Python-side defaults: every row names every column it sets
        common = {
            "job_id": job_id,
            "entity": "products",
            "estimated_count": 100,
            "work_units": 100,
            "priority": 0,
            "range_start": None,
            "range_end": None,
            "cursor": None,
            "processed_count": 0,
            "success_count": 0,
            "failed_count": 0,
            "owner": None,
            "run_id": None,
            "claim_token": 0,
            "claims": 0,
            "last_heartbeat": None,
            "closed_count": 0,
            "retry_count": 0,
        }
        with engine.begin() as conn:
            conn.execute(t.schema.insert().values(id=1, version=1, upgraded_at=now - 86400))
            conn.execute(
                v1_job.insert().values(
                    id=job_id,
                    alias_key="products",
                    status=JobStatus.RUNNING,
                    config_json='{"batch": 7}',
                    targets_json='{"products": "products_v1"}',
                    run_id="run-v1",
                    total_records=300,
                    processed_records=130,
                    success_records=125,
                    failed_records=5,
                    created_by="sparkindex 0.1",
                    created_at=now - 3600,
                    started_at=now - 3500,
                    updated_at=now - 60,
                )
            )
            conn.execute(
                v1_partition.insert(),
                [
                    {
                        **common,
                        "id": ids[0],
                        "partition_index": 0,
                        "range_end": "[100]",
                        "status": P.COMPLETED,
                        "cursor": "[99]",
                        "processed_count": 100,
                        "success_count": 98,
                        "failed_count": 2,
                        "claim_token": 1,
                        "claims": 1,
                    },
                    {
                        **common,
                        "id": ids[1],
                        "partition_index": 1,
                        "range_start": "[100]",
                        "range_end": "[200]",
                        "status": P.PROCESSING,
                        "cursor": '[130, "x"]',
                        "processed_count": 30,
                        "success_count": 27,
                        "failed_count": 3,
                        "owner": "exec-old",
                        "run_id": "run-v1",
                        "claim_token": 2,
                        "claims": 2,
                        "last_heartbeat": now,
                    },
                    {
                        **common,
                        "id": ids[2],
                        "partition_index": 2,
                        "range_start": "[200]",
                        "status": P.PENDING,
                    },
                ],
            )
        return job_id, ids
    finally:
        engine.dispose()


def test_v1_store_is_upgraded_in_place_and_keeps_its_data(store_url: tuple[str, str]) -> None:
    url, prefix = store_url
    job_id, ids = create_v1_store(url, prefix)

    store = CoordinationStore(url, prefix)
    try:
        assert SCHEMA_VERSION == 11
        assert schema_version(store.engine, prefix) == [(1, SCHEMA_VERSION)]
        assert "writer" in partition_columns(store.engine, prefix)  # v2
        indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes(f"{prefix}si_partition")}
        assert f"{prefix}si_partition_next" in indexes  # v3: the claim-order index
        assert "fingerprint" in table_columns(store.engine, f"{prefix}si_job")  # v4
        assert "attempt_key" in table_columns(store.engine, f"{prefix}si_dead_letter")  # v4
        assert "bulk_latency" in partition_columns(store.engine, prefix)  # v5
        assert "stages" in partition_columns(store.engine, prefix)  # v6
        assert "update_errors" in partition_columns(store.engine, prefix)  # v7
        assert "partition_not_found" in table_columns(store.engine, f"{prefix}si_job")  # v7
        assert sa.inspect(store.engine).has_table(f"{prefix}si_write_ahead")  # v8
        assert sa.inspect(store.engine).has_table(f"{prefix}si_swap_attempt")  # v9
        assert sa.inspect(store.engine).has_table(f"{prefix}si_sync_offset")  # v10 (test_schema_upgrade.py)

        job = store.job_rows.job(job_id)
        assert job.status == JobStatus.RUNNING and job.run_id == "run-v1"
        assert job.fingerprint is None, "a job planned before fingerprints has none"
        assert job.config == {"batch": 7} and job.targets == {"products": "products_v1"}
        assert (job.total_records, job.processed_records, job.success_records, job.failed_records) == (300, 130, 125, 5)
        parts = {p.partition_index: p for p in store.partition_rows.partitions(job_id)}
        assert {i: p.id for i, p in parts.items()} == ids
        assert [parts[i].status for i in range(3)] == [P.COMPLETED, P.PROCESSING, P.PENDING]
        assert parts[0].cursor == (99,) and parts[0].range_end == (100,) and parts[0].range_start is None
        assert (parts[0].processed_count, parts[0].success_count, parts[0].failed_count) == (100, 98, 2)
        assert parts[1].cursor == (130, "x") and parts[1].claim_token == 2 and parts[1].owner == "exec-old"
        assert all(p.writer is None for p in parts.values())

        # the pre-upgrade claim still fences, and its writer is now recorded
        store.partition_rows.save_progress(ids[1], 2, [140, "y"], 9, 1, writer="x")
        assert store.partition_rows.partition(ids[1]).writer == "x"
        assert store.partition_rows.partition(ids[1]).processed_count == 40
        fresh = store.partition_rows.claim(ids[2], "exec-new", "run-new", 60)
        assert fresh is not None and fresh.id == ids[2]
        store.partition_rows.save_progress(fresh.id, fresh.claim_token, [201], 1, 0, writer="exec-new:1")
        store.write_ahead.record(job_id, fresh.id, fresh.claim_token, 1, [201], [Written("202")], 1)  # v8
        assert store.write_ahead.unacknowledged(fresh.id, fresh.claim_token, [201]) == [Written("202")]
        with store.swap_log.attempt("products", "products_v1", None, 1, job_id):  # v9
            pass
        assert [a.outcome for a in store.swap_log.attempts("products")] == ["moved"]
        pt = store.t.partition
        with store.engine.connect() as conn:
            writers = dict(conn.execute(sa.select(pt.c.id, pt.c.writer).where(pt.c.job_id == job_id)).all())
        assert writers == {ids[0]: None, ids[1]: "x", ids[2]: "exec-new:1"}
        stats = store.partition_stats.stats(job_id)["products"]
        assert (stats.processed, stats.success, stats.failed) == (141, 135, 6)
    finally:
        store.close()

    # opening the upgraded store again applies nothing twice
    again = CoordinationStore(url, prefix)
    try:
        assert schema_version(again.engine, prefix) == [(1, SCHEMA_VERSION)]
        assert again.partition_rows.partition(ids[1]).writer == "x"
        assert len(again.partition_rows.partitions(job_id)) == 3
        # the upgraded store carries v4's features
        again.dead_letters.add(job_id, "products", ids[1], [("d", "E", "m")])
        again.dead_letters.add(job_id, "products", ids[1], [("d", "E", "m")])
        assert [d.attempts for d in again.dead_letters.list(alias="products")] == [1]
        assert again.job_rows.create_job(["products"], {}, "t", fingerprint="f").fingerprint == "f"
    finally:
        again.close()


def test_fresh_store_is_created_at_the_current_version(store_url: tuple[str, str]) -> None:
    url, prefix = store_url
    store = CoordinationStore(url, prefix)
    try:
        assert schema_version(store.engine, prefix) == [(1, SCHEMA_VERSION)]
        assert "writer" in partition_columns(store.engine, prefix)
    finally:
        store.close()


def test_store_with_a_newer_schema_is_refused(store_url: tuple[str, str]) -> None:
    url, prefix = store_url
    store = CoordinationStore(url, prefix)
    job = store.job_rows.create_job(["products"], {}, "test")
    st = store.t.schema
    with store.engine.begin() as conn:
        conn.execute(st.update().where(st.c.id == 1).values(version=SCHEMA_VERSION + 1))
    store.close()

    with pytest.raises(PermanentError, match=rf"version {SCHEMA_VERSION + 1} is newer"):
        CoordinationStore(url, prefix)

    engine = make_engine(url)
    try:
        assert schema_version(engine, prefix) == [(1, SCHEMA_VERSION + 1)], "a refused store is left untouched"
        jt = make_tables(prefix).job
        with engine.connect() as conn:
            assert conn.execute(sa.select(jt.c.status).where(jt.c.id == job.id)).scalar_one() == JobStatus.INITIALIZING
    finally:
        engine.dispose()
