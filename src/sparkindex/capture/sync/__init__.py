"""The runners of change capture, and the parts they share.

Two runners stream a change log through Spark: the live sync (``run.SyncRun``: ``sparkindex sync``) and a
reindex's catch-up round (:mod:`sparkindex.capture.catch_up_round`). Both are built from the same parts, each an
object handed what it needs, none reaching into another:

* ``feed``: ``Feed``: what a run reads from and writes to (the source and its change log, the target, the store,
  the group's positions, the plans), opened together by ``open_feed`` and closed together.
* ``state``: ``RunState``: what the parts share while a run runs: the stop flag, the error, the position
  acknowledged last, the totals.
* ``query``: ``ChangeStream``: one Structured Streaming query at a time, started again from the acknowledged
  position when it fails, until stopped, caught up or given up.
* ``sink``: ``BatchSink``: each micro-batch applied on Spark, then acknowledged. A failed batch is never
  acknowledged; errors come back as data (:mod:`sparkindex.spark.task_errors`).
* ``gaps``: ``GapHealer``: proves the log still serves the stored offsets. A gap is healed (take the position P,
  verify/repair on Spark, then store P) or refused with exit 3; a catch-up always refuses.
* ``events``: ``EventWatcher``: the driver's errors counted in the store, and those the other processes counted
  shown on the terminal.
* ``hand_over``: ``HoldResponder``: the live sync's side of a reindex's hold. It answers with the position it
  applied, pauses, and continues from the offsets the reindex leaves.
* ``health``: ``StreamHealth``: whether a live run keeps its aliases current (starting, held, reconciling,
  stalled, ...), read from another thread by ``sync --metrics-port``'s ``/healthz`` and ``/livez``.
* ``run``: ``SyncRun``: the live sync: the lock per consumer group and source database, the presence it
  announces, the holds it answers, the daily deferred refresh.
* ``deferred``: deferred relations applied as one partitioned Spark job (``sync --apply-deferred`` or
  ``sync.deferred_at``).
* ``summary``: ``SyncSummary``: what a run reports at its end (``sync --json`` prints it, the catch-up reads it).
"""
