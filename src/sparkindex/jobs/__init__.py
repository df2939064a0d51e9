"""Orchestration: what runs, in what order, and when an alias may move.

A job decides; ``spark`` turns its work into Spark jobs, and ``worker``, ``changes`` and ``verify`` do the
engine-neutral work inside the tasks. The driver resolves and fingerprints the document plans once and ships them
to the tasks, so every document of a version is built from one plan; before a swap it resolves them again, and a
schema that changed fails the job. Every job update is fenced by the lock's tokens.

* ``reindex``: a full reindex: lock, plan or resume, Spark passes until no work is left, finalize, summary.
* ``head_start``: the driver runs pending partitions itself while the JVM starts (local masters only).
* ``finalize``: count check, fenced compare-and-swap of the alias, prune. A rerun finishes a job that failed after
  its swap.
* ``catch_up``: changes committed during a rebuild replayed into the new version, then the hand-over with live
  syncs before the swap (guarantee 6).
* ``hold_keeper``: renews a reindex's holds on its aliases while it needs them. A lost hold refuses the swap.
* ``keeper``: renews the alias locks. On a lost lock it calls ``on_lost`` (the driver cancels its Spark job).
* ``fingerprint``: what a job's documents are built from, so a rerun resumes only the same job.
* ``progress``: a thread polling the store's aggregated stats for a listener (the CLI's bars).
* ``control``: a job's status and a graceful stop.
* ``status``: the aliases' latest job and last verify, as ``status --json`` reports them.
* ``verify_run``: verify or repair for a pipeline: plans, the Spark job, the result recorded per alias. Also the
  scheduled verify (``verify: {every: ...}``) and its lock.
* ``repair``: ``verify --repair``: tasks write their fixes as they find them, then a read-only pass reports what
  is left.
* ``redrive``: ``dlq redrive``: dead letters rebuilt from the source by key and written again, in the driver.
* ``gc``: forgets old jobs, resolutions, verify results and index versions, and reports what it kept and why.
* ``explain``: ``sparkindex explain``: one real document, its mapping and how it is built, with the reindex's own
  code. Writes nothing.
* ``explain_partitions``: the partition plan ``explain`` shows, with the rows of each range counted where cheap.
* ``sync/``: the sync job: the stream, acknowledgement, the hand-over, gaps, deferred relations (see its
  docstring).

``VerifyReport`` and ``verify_alias`` are re-exported from :mod:`sparkindex.verify`.
"""

from sparkindex.jobs.reindex import ReindexJob, ReindexSummary
from sparkindex.verify.verifier import VerifyReport, verify_alias

__all__ = ["ReindexJob", "ReindexSummary", "VerifyReport", "verify_alias"]
