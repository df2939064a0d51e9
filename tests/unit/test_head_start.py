"""The driver's head start on real parts (SQLite shop, store, Tantivy), Spark's part played by a
thread running the same PartitionWorker over every partition in claim order, as a pass does.

* While the session is not ready, the driver runs partitions from the back of the claim order.
* It stops claiming once the session is ready and the pass has claimed a partition, and what it
  and the "pass" ran adds up exactly:
  every partition completed once, every row indexed once, none twice.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from tests.e2e.shop import make_shop
from tests.unit.test_partition_worker import plan_job

from sparkindex.coordination.latency import LatencyHistogram
from sparkindex.coordination.recovery import holder_name
from sparkindex.coordination.states import PartitionStatus
from sparkindex.jobs.finalize import adopt_completed_stages
from sparkindex.jobs.head_start import HeadStart
from sparkindex.spark.context import WorkerContext
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

P = PartitionStatus


def test_head_start_and_the_pass_share_the_partitions_exactly_once(tmp_path: Path) -> None:
    pipeline = make_shop(tmp_path, products=1200, partition_size=50)
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index"))
    store, job_id, index, plan = plan_job(pipeline, target, "products")
    parts = store.partition_rows.partitions(job_id)
    assert len(parts) >= 20
    store.locks.acquire("products", holder_name("run-1"), 600.0)  # as the driver holds it: the head start asks
    session: Future[Any] = Future()
    head = HeadStart(pipeline, job_id, "run-1", session, {"products": plan}, "fp-1")
    assert HeadStart.wanted(pipeline, session)
    head.start()
    # Let the driver finish a few partitions before the "session" is ready.
    deadline = threading.Event()
    for _ in range(600):
        if sum(o.status == "completed" for o in head.outcomes) >= 3:
            break
        deadline.wait(0.05)
    session.set_result(object())
    worker = WorkerContext(pipeline, store).partition_worker(job_id, "run-1", {"products": plan}, "fp-1")
    outcomes = [worker.run(p.id, "test:pass", take_over_run=False) for p in parts]  # the pass: front to back
    head.join()

    by_driver = [o.partition_id for o in head.outcomes if o.status == "completed"]
    by_pass = [o.partition_id for o in outcomes if o.status == "completed"]
    assert len(by_driver) >= 3, "the driver ran partitions while the session was starting"
    assert by_driver == [p.id for p in parts[::-1][: len(by_driver)]], "from the back of the claim order"
    assert sorted(by_driver + by_pass) == sorted(p.id for p in parts), "each partition completed exactly once"
    assert {o.partition_id for o in outcomes if o.status == "skipped"} >= set(by_driver[:-1])
    done = store.partition_rows.partitions(job_id)
    assert {p.status for p in done} == {P.COMPLETED}
    assert sum(p.success_count for p in done) == 1200
    # every partition timed its bulk requests into its stored latency histogram
    assert all(LatencyHistogram.from_json(p.bulk_latency).count >= 1 for p in done)
    adopt_completed_stages(store, target, job_id, {"products": index})
    target.finish_version(index)
    assert target.count(index) == 1200
    ids = [i for i, _ in target.scan_hashes(index)]
    assert len(set(ids)) == len(ids) == 1200
    assert not HeadStart.wanted(pipeline, session), "a ready session needs no head start"
