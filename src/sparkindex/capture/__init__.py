"""Change capture's machinery: from committed row changes to rebuilt documents, in order, resumably.

These are the engine-neutral parts that the sync's Spark tasks and a reindex's catch-up call. The sync job itself
(the stream, acknowledgement, gaps, the hand-over, deferred relations) is :mod:`sparkindex.capture.sync`. The change
model and the ``ChangeSource`` interface are :mod:`sparkindex.sources`, where the log-based sources live with their
dialect. A change only says which row changed and where in the log; documents are always rebuilt from the current
rows by key, with the version column or the log position as their external version.

* ``source``: the change source of a pipeline: log-based where the dialect has one, else polling. A source's module
  is imported only when chosen.
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
