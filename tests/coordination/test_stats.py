"""Per-entity stats and their roll-up onto the job row - on every store."""

from __future__ import annotations

import orjson
import pytest
import sqlalchemy as sa

from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import LockLost
from tests.coordination.helpers import spec

P = PartitionStatus


# -- stats -----------------------------------------------------------------------------------------
def test_stats_and_roll_up(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products", "orders"], {}, "test")
    store.partition_rows.add_partitions(
        job.id,
        [spec(0, estimated=100), spec(1, estimated=50), spec(2, estimated=25), spec(0, entity="orders", estimated=40)],
    )
    before = store.partition_stats.stats(job.id)
    assert set(before) == {"orders", "products"}
    assert before["products"].total == 175 and before["orders"].total == 40
    assert before["products"].partitions == {"PENDING": 3}
    assert before["products"].processed == 0 and not before["products"].done

    parts = {(p.entity, p.partition_index): p for p in store.partition_rows.partitions(job.id)}
    a = store.partition_rows.claim(parts[("products", 0)].id, "w", "r", 60)
    b = store.partition_rows.claim(parts[("products", 1)].id, "w", "r", 60)
    c = store.partition_rows.claim(parts[("orders", 0)].id, "w", "r", 60)
    assert a and b and c
    store.partition_rows.save_progress(a.id, a.claim_token, [10], 8, 2)
    store.partition_rows.save_progress(a.id, a.claim_token, [20], 5, 0)
    store.partition_rows.save_progress(b.id, b.claim_token, [30], 4, 1)
    store.partition_rows.save_progress(c.id, c.claim_token, [40], 40, 0)
    store.partition_rows.complete(a.id, a.claim_token)
    store.partition_rows.complete(c.id, c.claim_token)

    stats = store.partition_stats.stats(job.id)
    prod, orders = stats["products"], stats["orders"]
    assert (prod.total, prod.processed, prod.success, prod.failed) == (175, 20, 17, 3)
    assert prod.partitions == {"COMPLETED": 1, "PROCESSING": 1, "PENDING": 1}
    assert not prod.done
    assert (orders.total, orders.processed, orders.success, orders.failed) == (40, 40, 40, 0)
    assert orders.partitions == {"COMPLETED": 1}
    assert orders.done

    rolled = store.roll_up(job.id)
    assert rolled == stats
    rec = store.job_rows.job(job.id)
    assert rec.total_records == 215
    assert rec.processed_records == 60
    assert rec.success_records == 57
    assert rec.failed_records == 3
    assert rec.status == JobStatus.INITIALIZING  # rolling up never moves the state


def test_stats_of_unknown_job_is_empty(store: CoordinationStore) -> None:
    assert store.partition_stats.stats("no-such-job") == {}


def test_stats_aggregate_many_progress_calls_per_entity_and_status(store: CoordinationStore) -> None:
    """Sums per entity and partition counts per status, checked against a ledger kept here."""
    job = store.job_rows.create_job(["products", "orders", "users"], {}, "test")
    layout = {"products": [100, 60, 30, 10], "orders": [70, 20], "users": [5, 5, 5]}
    store.partition_rows.add_partitions(
        job.id,
        [spec(i, entity=e, estimated=est) for e, ests in layout.items() for i, est in enumerate(ests)],
    )
    other = store.job_rows.create_job(["products"], {}, "test")  # another job's rows never leak into ours
    store.partition_rows.add_partitions(other.id, [spec(0, estimated=999)])
    o = store.partition_rows.claim(store.partition_rows.partitions(other.id)[0].id, "x", "run", 60)
    assert o is not None
    store.partition_rows.save_progress(o.id, o.claim_token, [1], 500, 500)

    parts = {(p.entity, p.partition_index): p for p in store.partition_rows.partitions(job.id)}
    ledger = {e: [0, 0] for e in layout}  # entity -> [success, failed]
    batches = {
        ("products", 0): [(10, 0), (7, 3), (1, 1)],
        ("products", 1): [(4, 0), (0, 2)],
        ("products", 2): [(9, 0)],
        ("orders", 0): [(30, 5), (20, 0), (15, 0)],
        ("orders", 1): [(1, 0)],
        ("users", 0): [(2, 3)],
    }
    tokens = {}
    for key, calls in batches.items():
        rec = store.partition_rows.claim(parts[key].id, "w", "run", stale_after_s=60)
        assert rec is not None
        tokens[key] = rec.claim_token
        for n, (ok, bad) in enumerate(calls):
            store.partition_rows.save_progress(rec.id, rec.claim_token, [n], ok, bad, writer="w")
            ledger[key[0]][0] += ok
            ledger[key[0]][1] += bad
    # a fenced-off writer adds nothing
    with pytest.raises(LockLost):
        store.partition_rows.save_progress(parts[("orders", 1)].id, tokens[("orders", 1)] + 7, [9], 1000, 1000)

    # outcomes: products COMPLETED/FAILED/CLOSED/PENDING, orders COMPLETED/PROCESSING, users all PENDING
    store.partition_rows.complete(parts[("products", 0)].id, tokens[("products", 0)])
    assert (
        store.partition_rows.fail(parts[("products", 1)].id, tokens[("products", 1)], "boom", max_retries=0) == P.FAILED
    )
    store.partition_rows.close_partition(parts[("products", 2)].id, tokens[("products", 2)], reopen_after_s=1e9)
    store.partition_rows.complete(parts[("orders", 0)].id, tokens[("orders", 0)])
    store.partition_rows.release(parts[("users", 0)].id, tokens[("users", 0)])

    stats = store.partition_stats.stats(job.id)
    assert list(stats) == ["orders", "products", "users"]
    for entity, (ok, bad) in ledger.items():
        s = stats[entity]
        assert s.entity == entity
        assert s.total == sum(layout[entity]), entity
        assert (s.success, s.failed, s.processed) == (ok, bad, ok + bad), entity
        assert all(isinstance(v, int) for v in (s.total, s.processed, s.success, s.failed))
    assert stats["products"].partitions == {"COMPLETED": 1, "FAILED": 1, "CLOSED": 1, "PENDING": 1}
    assert stats["orders"].partitions == {"COMPLETED": 1, "PROCESSING": 1}
    assert stats["users"].partitions == {"PENDING": 3}
    assert (stats["products"].success, stats["products"].failed) == (31, 6)
    assert (stats["orders"].success, stats["orders"].failed) == (66, 5)
    assert not any(s.done for s in stats.values())
    assert sum(n for s in stats.values() for n in s.partitions.values()) == 9
    assert (
        set(store.partition_stats.stats(other.id)) == {"products"}
        and store.partition_stats.stats(other.id)["products"].processed == 1000
    )


def test_roll_up_copies_totals_and_stats_onto_the_job_and_is_idempotent(store: CoordinationStore) -> None:
    job = store.job_rows.create_job(["products", "orders"], {}, "test")
    store.partition_rows.add_partitions(
        job.id,
        [spec(0, estimated=30, work=30), spec(1, estimated=20, work=20), spec(0, entity="orders", estimated=7, work=7)],
    )
    a = store.partition_rows.claim(
        store.partition_rows.claimable(job.id)[0].id, "w", "run", 60
    )  # the largest work first: products #0
    assert a is not None and (a.entity, a.partition_index) == ("products", 0)
    store.partition_rows.save_progress(a.id, a.claim_token, [1], 6, 1)

    def job_stats() -> dict[str, object]:
        jt = store.t.job
        with store.engine.connect() as conn:
            raw = conn.execute(sa.select(jt.c.stats_json).where(jt.c.id == job.id)).scalar_one()
        return orjson.loads(raw)

    first = store.roll_up(job.id)
    second = store.roll_up(job.id)  # rolling up twice adds nothing
    assert first == second
    rec = store.job_rows.job(job.id)
    assert (rec.total_records, rec.processed_records, rec.success_records, rec.failed_records) == (57, 7, 6, 1)
    assert job_stats() == {k: s.to_dict() for k, s in first.items()}
    assert job_stats()["products"]["partitions"] == {"PROCESSING": 1, "PENDING": 1}
    untouched = {"total": 7, "processed": 0, "success": 0, "failed": 0, "partitions": {"PENDING": 1}}
    assert job_stats()["orders"] == untouched

    # more progress, then a new roll-up replaces the totals
    store.partition_rows.save_progress(a.id, a.claim_token, [2], 3, 0)
    store.partition_rows.complete(a.id, a.claim_token)
    b = store.partition_rows.claim(store.partition_rows.claimable(job.id)[0].id, "w", "run", 60)
    assert b is not None and (b.entity, b.partition_index) == ("products", 1)
    store.partition_rows.save_progress(b.id, b.claim_token, [1], 0, 4)
    third = store.roll_up(job.id)
    rec = store.job_rows.job(job.id)
    assert (rec.total_records, rec.processed_records, rec.success_records, rec.failed_records) == (57, 14, 9, 5)
    assert job_stats() == {k: s.to_dict() for k, s in third.items()}
    assert third["products"].partitions == {"COMPLETED": 1, "PROCESSING": 1}
    assert (third["products"].success, third["products"].failed) == (9, 5)
    assert rec.status == JobStatus.INITIALIZING
