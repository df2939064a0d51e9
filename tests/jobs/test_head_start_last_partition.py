"""A reindex whose last pending partition the driver's head start took, and left unfinished.

The head start claims partitions while Spark starts. When it holds the only pending partition at
the moment the driver asks what a pass should run, the answer is "nothing". If the head start
then stops before finishing it (it stops, with a warning, when the store goes away under it), the
partition stays PROCESSING under the driver's own run id. Before the fix no pass ran, so no one
handed it back, and the job ended FAILED ("left unfinished; rerun to resume") though it could
have finished. Now the driver waits for the head start, hands back what it left, and runs it.

Real parts: the SQLite shop, the store, Tantivy, the test session's Spark. The head start is
replaced only in how it ends: it claims the partition through the store, then stops.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from sparkindex.coordination.states import PartitionStatus
from sparkindex.jobs import reindex
from sparkindex.jobs.head_start import HeadStart
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_store
from tests.e2e.shop import make_shop

P = PartitionStatus
PRODUCTS = 60


class _StopsHoldingThePartition(HeadStart):
    """Claims the only pending partition and stops before running it; the session becomes ready."""

    spark: Any = None
    claimed: list[str] = []

    def start(self) -> None:  # on the driver's thread: claimed before the driver asks what to run
        p = self.pipeline
        with open_store(p) as store:
            [last] = store.partition_rows.partitions(self.job_id, [P.PENDING])
            held = store.partition_rows.claim(
                last.id, "test:head-start", self.run_id, p.job.claim_timeout_s, take_over_run=False
            )
            assert held is not None and held.status == P.PROCESSING
            self.claimed.append(last.id)
        self.session.set_result(self.spark)


def test_a_partition_the_head_start_left_is_run_by_a_pass(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = make_shop(tmp_path, products=PRODUCTS, partition_size=PRODUCTS)  # one partition
    monkeypatch.setattr(_StopsHoldingThePartition, "spark", spark)
    monkeypatch.setattr(_StopsHoldingThePartition, "claimed", [])
    monkeypatch.setattr(reindex, "HeadStart", _StopsHoldingThePartition)
    job = ReindexJob(pipeline, ["products"], new=True)
    job._spark_future = Future()  # a session still starting: the head start is wanted
    assert reindex.HeadStart.wanted(pipeline, job._spark_future), "else no one would complete the session"

    summary = job.run()

    assert _StopsHoldingThePartition.claimed, "the head start held the partition when the driver asked"
    assert summary.status == "COMPLETED", summary
    with open_store(pipeline) as store:
        [part] = store.partition_rows.partitions(summary.job_id)
    assert part.id == _StopsHoldingThePartition.claimed[0]
    assert part.status == P.COMPLETED and part.success_count == PRODUCTS
