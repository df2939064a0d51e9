"""A SparkSession the caller hands in (``spark=``): borrowed for the call, handed back as it was.

Why: a notebook or a scheduler's worker owns its session and its process. When sparkindex starts
a session itself (:func:`sparkindex.spark.session.build_session`) it also chooses the workers'
interpreter (``PYSPARK_PYTHON`` while the context starts, put back after), a filter on the root
logger and a quieter accumulator server; on a borrowed one it does none of that, and sets no
conf. What a job does set on a session is the job group of the thread that runs its Spark jobs
(thread-local properties, so that a lost lock can cancel exactly its own jobs): those are put
back when the call returns, so the caller's next job is not filed under sparkindex's group.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError

log = logging.getLogger("sparkindex.api")

#: the thread-local properties ``SparkContext.setJobGroup`` sets
JOB_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def check_session(pipeline: Pipeline, spark: Any) -> None:
    """The borrowed session's master, not the pipeline's ``spark.master``, says where tasks run:
    executors on other machines cannot share a SQLite coordination store."""
    master = str(spark.sparkContext.master)
    if not master.startswith("local") and pipeline.coordination_url().startswith("sqlite"):
        raise ConfigError(
            f"{pipeline.origin}: coordination.url: SQLite cannot coordinate the Spark cluster of the session "
            f"passed in (its master is {master!r}); use a PostgreSQL or MySQL coordination store"
        )


@contextlib.contextmanager
def borrowed(pipeline: Pipeline, spark: Any) -> Iterator[Callable[[], Any] | None]:
    """The jobs' ``spark_factory`` for *spark* (None: the job starts its own session), with the
    calling thread's job properties restored afterwards."""
    if spark is None:
        yield None
        return
    check_session(pipeline, spark)
    sc = spark.sparkContext
    saved = {key: sc.getLocalProperty(key) for key in JOB_PROPERTIES}
    try:
        yield lambda: spark
    finally:
        try:
            for key, value in saved.items():
                sc.setLocalProperty(key, value)  # None removes the property
        except Exception as exc:  # noqa: BLE001 - a session that ended under the job: nothing left to restore
            log.warning("could not restore the session's job properties (%s); the error of the call stands", exc)
