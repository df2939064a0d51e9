"""The driver's head start: partitions run in the driver process while the JVM starts.

A reindex starts its SparkSession on a thread while it plans, but the JVM takes seconds more
than the planning (about 6-10 s on two cores), and until then no task runs. The driver already
holds everything a worker needs (the pipeline, a store, the source), so it runs pending
partitions itself through the same :class:`PartitionWorker` a Spark task uses, taking them from
the end of the claim order (the Spark pass starts at the front). It stops claiming once the
session is ready and another worker of the run has claimed a partition (submitting the first
job and starting the Python workers takes seconds more after the session is up), and finishes
the partition in hand. Neither takes the other's partitions (``take_over_run=False``). Claims,
cursors and fencing are the worker's own, so a partition run here is exactly as safe as one run
on an executor.

Only for local masters: on a cluster the driver may be a small machine far from the data.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import error_line
from sparkindex.coordination.recovery import run_holds_its_locks
from sparkindex.coordination.states import PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import SparkIndexError
from sparkindex.resources import open_store
from sparkindex.spark.context import WorkerContext
from sparkindex.worker.partition import PartitionOutcome

log = logging.getLogger(__name__)


class HeadStart:
    def __init__(
        self,
        pipeline: Pipeline,
        job_id: str,
        run_id: str,
        session: Future[Any],
        plans: Mapping[str, IndexPlan],
        fingerprint: str,
    ) -> None:
        self.pipeline = pipeline
        self.plans = plans  # the driver's, as the pass's tasks get them
        self.fingerprint = fingerprint
        self.job_id = job_id
        self.run_id = run_id
        self.session = session
        self.outcomes: list[PartitionOutcome] = []
        self._stop = threading.Event()  # set by the driver: a pass ended, or the run is ending
        self._thread = threading.Thread(target=self._run, name="sparkindex-head-start", daemon=True)

    @staticmethod
    def wanted(pipeline: Pipeline, session: Future[Any] | None) -> bool:
        from sparkindex.spark.session import effective_master

        return session is not None and not session.done() and effective_master(pipeline.spark).startswith("local")

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        """Stop claiming and wait for the partition in hand."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _done(self, store: CoordinationStore, owner: str) -> bool:
        if self._stop.is_set():
            return True
        if not run_holds_its_locks(store, self.plans, self.run_id):
            return True  # lost while the JVM starts: the keeper has no Spark job to cancel yet
        if not self.session.done():
            return False
        return self.session.exception() is not None or store.partition_rows.claimed_by_others(
            self.job_id, self.run_id, owner
        )

    def _run(self) -> None:
        """The thread's body. A store out of reach ends it with a warning: what it leaves is the
        Spark passes' to run, and an exception escaping a thread is only a printed traceback.
        The store, source and target it opened are closed when it ends."""
        p = self.pipeline
        try:
            store = open_store(p)
        except SparkIndexError as exc:
            log.warning("the driver's head start did not start: %s", exc)
            return
        owner = f"{socket.gethostname()}:{os.getpid()}:{self.run_id}:driver"
        try:
            with store, WorkerContext(p, store) as context:
                key = f"{self.job_id}:{self.fingerprint}"
                worker = context.partition_worker(self.job_id, self.run_id, self.plans, key)
                while not self._done(store, owner):
                    pending = store.partition_rows.partitions(self.job_id, [PartitionStatus.PENDING])
                    if not pending:
                        return
                    outcome = worker.run(pending[-1].id, owner, take_over_run=False)
                    self.outcomes.append(outcome)
                    if outcome.status != "completed":
                        return  # stopping, or anything unusual: left to the Spark passes and their retries
        except SparkIndexError as exc:
            log.warning("the driver's head start stopped: %s", exc)
        except SQLAlchemyError as exc:  # a database out of reach (the store's, mostly) after any reruns
            log.warning("the driver's head start stopped on a database error: %s", error_line(exc))
