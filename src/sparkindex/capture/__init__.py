"""Change capture: from committed row changes to rebuilt documents, in order, resumably.

Everything that keeps an index in step with its source lives here; the per-database log readers stay with their
dialect (:mod:`sparkindex.sources.postgres.changes`, :mod:`sparkindex.sources.mysql.changes`) behind the
``ChangeSource`` protocol (:mod:`sparkindex.sources.change_source`), and the state the store keeps for it (offsets,
holds, the version ledger, deferred changes) is :mod:`sparkindex.coordination`'s. A change only says which row
changed and where in the log; documents are always rebuilt from the current rows by key, with the version column
or the log position as their external version. The words used here (hold, hand-over, gap, P0) are defined in
docs/internals.md's glossary.

The runners:

* ``sync/``: the live sync and the parts both runners share (see its docstring).
* ``catch_up_round``: one round of a reindex's catch-up: a runner of its own over the shared parts.
* ``catch_up``: a reindex's side of change capture: P0 recorded before the partitions, the rounds, the holds on the
  live syncs, the swap and the hand-over.
* ``hold_keeper``: renews a reindex's holds on its aliases while it needs them. A lost hold refuses the swap.

The machinery they drive, run inside Spark tasks or the driver:

* ``source``: the change source of a pipeline: log-based where the dialect has one, else polling.
* ``stream``: the change stream for Structured Streaming: a Python stream reader, and ``ApplyTasks`` (which carries
  the plans) for each micro-batch.
* ``session``: what a process needs to read or apply changes, cached per pipeline. Plans are resolved by the driver
  (``resolve_consumer_plan``) and shipped.
* ``fanout``: a changed row to the root keys of the documents it touches, up the relation tree, old and new row
  images both.
* ``apply``: those documents rebuilt by key and written with external versions; a TRUNCATE rebuilds every document.
  For a target that does not honour versions, a version ledger in the store.
* ``join_removals``: join children that are gone or moved, deleted under their old routing before the rebuild.
* ``ranges``: sort-key ranges (cut by the target's key splits) that spread a key diff or a TRUNCATE over Spark tasks.
* ``polling``: change capture for any database by a monotone column, with an overlap window for late commits, and
  tombstones or a key diff for deletes.
* ``polling_cursor``: a keyset cursor per table on (column, row key), so ties larger than a batch lose nothing.
* ``polling_config``: every index's ``changes:`` merged per table; contradictions are refused.
* ``consumer_offsets``: where consumer offsets live (``sync.offsets``: the store, or an index of the target), and
  the carry-over between them.
* ``sync_lock``: the sync's lock, one per consumer group and source database.
* ``restarts``: when a failed stream is started again, and when a sync gives up.
* ``sync_errors``: one readable line of a Spark error. Its meaning comes from :mod:`sparkindex.spark.task_errors`.
* ``control``: stop a consumer group's sync; drop its slot.
"""
