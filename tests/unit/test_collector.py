"""The document-building processes run with the tuned cyclic collector: every Spark Python worker
(forked from sparkindex's daemon) and the reindex driver, whose head start builds documents too."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from sparkindex.worker.collector import GEN0_THRESHOLD


def test_spark_python_workers_start_tuned(spark: Any) -> None:
    def worker_gc(_: Any) -> Any:  # defined here: pickled by value, as the product's task functions are
        import gc

        yield (gc.get_threshold()[0], gc.get_freeze_count())

    seen = spark.sparkContext.parallelize(range(4), 4).mapPartitions(worker_gc).collect()
    assert len(seen) == 4
    for threshold, frozen in seen:
        assert threshold == GEN0_THRESHOLD
        assert frozen > 10_000, "the daemon's imported objects are frozen before it forks"


def test_tuning_freezes_what_exists_and_raises_the_young_threshold() -> None:
    script = (
        "import gc, sqlalchemy; from sparkindex.worker.collector import tune_collector; "
        "before = gc.get_freeze_count(); tune_collector(); "
        "print(before, gc.get_freeze_count(), gc.get_threshold()[0])"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    before, after, threshold = map(int, out)
    assert before == 0 and after > 10_000 and threshold == GEN0_THRESHOLD
