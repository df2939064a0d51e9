"""Orchestration: what runs, in what order, and when an alias may move.

A job decides; the engines below it do the work: ``spark`` turns it into Spark jobs, ``worker`` builds and writes
partitions, ``verify`` compares and repairs, ``capture`` keeps indexes in step. The driver resolves and fingerprints
the document plans once and ships them to the tasks, so every document of a version is built from one plan; before
a swap it resolves them again, and a schema that changed fails the job. Every job update is fenced by the lock's
tokens.

* ``reindex``: a full reindex: lock, plan or resume, Spark passes until no work is left, catch-up, finalize,
  summary.
* ``head_start``: the driver runs pending partitions itself while the JVM starts (local masters only).
* ``finalize``: count check, fenced compare-and-swap of the alias, prune. A rerun finishes a job that failed after
  its swap.
* ``progress``: a thread polling the store's aggregated stats for a listener.
* ``control``: a job's status and a graceful stop.
* ``status``: the aliases' latest job and last verify, as ``status --json`` reports them.
* ``redrive``: ``dlq redrive``: dead letters rebuilt from the source by key and written again, in the driver.
* ``gc``: forgets old jobs, resolutions, verify results and index versions, and reports what it kept and why.
* ``explain``: ``sparkindex explain``: one real document, its mapping and how it is built, with the reindex's own
  code. Writes nothing.
* ``explain_partitions``: the partition plan ``explain`` shows, with the rows of each range counted where cheap.
* ``explain_shape``: the shape ``explain`` lists: filters, renames, left-out and computed fields, routing, deletes,
  the transform.

The verify and repair jobs are :mod:`sparkindex.verify.run`; the sync job and the catch-up are
:mod:`sparkindex.capture`. ``VerifyReport`` and ``verify_alias`` are re-exported from :mod:`sparkindex.verify`.
"""

from sparkindex.jobs.reindex import ReindexJob, ReindexSummary
from sparkindex.verify.local import verify_alias
from sparkindex.verify.verifier import VerifyReport

__all__ = ["ReindexJob", "ReindexSummary", "VerifyReport", "verify_alias"]
