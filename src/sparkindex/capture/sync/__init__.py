"""The sync job: a Spark stream from a change source, applied in order per consumer group.

The driver owns the acknowledgements: a batch's positions are stored only after every alias applied it, so a crash
replays at most the batches not acknowledged. ``run.SyncRun`` is composed of one mixin per concern (the sink, the
hand-over, gap healing), each in a module of its own. The machinery they drive (fan-out, apply, offsets, polling,
the lock key) is :mod:`sparkindex.capture`; the change model and the change sources are :mod:`sparkindex.sources`.

* ``run``: ``sparkindex sync``: one Structured Streaming query per run, the lock per consumer group and source
  database, restarts, and the daily deferred refresh.
* ``sink``: ``BatchSink``: each micro-batch applied on Spark, then acknowledged. A failed batch is never
  acknowledged; errors come back as data (:mod:`sparkindex.spark.task_errors`).
* ``hand_over``: ``HoldAnswering``: the sync's side of a reindex's hold. It answers with the position it applied,
  pauses, and continues from the offsets the reindex leaves.
* ``gaps``: ``GapHealing``: proves the log still serves the stored offsets (guarantee 9). A gap is healed (take
  the position P, verify/repair on Spark, then store P) or refused with exit 3.
* ``deferred``: deferred relations applied as one partitioned Spark job (``sync --apply-deferred`` or
  ``sync.deferred_at``).
* ``summary``: ``SyncSummary``: what a run reports at its end (``sync --json`` prints it, the catch-up reads it).
"""
