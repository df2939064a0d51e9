"""One partition, exactly once: the engine-neutral protocol every reindex task, the driver's head
start and verify's repair writes run, whatever the target.

A partition is claimed, read in keyset pages from its stored cursor, built into documents and
written; progress is saved only after the writes it covers are durable, so a crash redoes at
most the unacknowledged tail and never loses or doubles a document.

* ``partition``: ``PartitionWorker``: claim, pages, batches, rewind on lost writes, and the
  outcome of an attempt (completed, failed, CLOSED while the target stays down, lost).
* ``writes``: the write strategy a partition uses (``PartitionWrites``), with its batch and claim.
* ``staged_writes``: into a private stage of a new Tantivy version, adopted at the finish.
* ``bulk_writes``: bulk requests in flight, synced before progress is saved; undone by the next
  attempt where the cursor does not cover them (``in_place``).
* ``in_place``: writes straight into an index, recorded before each bulk (the write-ahead records
  in the store) so a later attempt can undo what its cursor does not cover.
* ``bulk``: the bulk retry loop: per-item results, only the failed subset retried with capped
  backoff; items still transient after every retry close the partition for a later pass.
* ``lease``: the claim's lease, renewed in the background; no write once it may have passed.
* ``settings``: the worker's knobs from the pipeline's ``job`` section.
* ``collector``: the garbage collector tuned for document-building processes.
"""
