"""PySpark's worker daemon, with sparkindex imported before it forks its workers.

Every Python worker forks from the daemon. Importing the partition worker's modules (SQLAlchemy,
pydantic, pyarrow, tantivy, the drivers) takes about a second of CPU per process; done once in the
daemon, each forked worker starts with them already loaded. Selected with
``spark.python.daemon.module`` by the session factory. The daemon also tunes the garbage
collector and glibc's allocator before it forks (:mod:`sparkindex.worker.collector`,
:mod:`sparkindex.allocator`).

Spark starts it as ``<workers' interpreter> -m sparkindex.spark.daemon`` in the executor's working
folder, so it imports sparkindex from wherever that interpreter finds it: the driver's own venv on a
machine that shares it, or an environment shipped with the job (``--archives env.tar.gz#environment``
and ``./environment/bin/python``, docs/deploy.md). Only pyspark comes from the cluster's Spark
(its ``pyspark.zip`` is first on the workers' ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib

PRELOAD = (
    "sparkindex.spark.partition_job",
    "sparkindex.spark.context",
    "sparkindex.targets.tantivy.client",
    "sqlalchemy",
    "pyarrow",
)

if __name__ == "__main__":
    for name in PRELOAD:
        importlib.import_module(name)
    from pyspark.daemon import manager

    from sparkindex.allocator import tune_allocator
    from sparkindex.worker.collector import tune_collector

    tune_collector()  # inherited by every forked worker (sparkindex/worker/collector.py)
    tune_allocator()  # so is the allocator's mmap threshold (sparkindex/allocator.py)

    manager()
