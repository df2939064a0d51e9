"""Verification: does the index behind an alias equal the source, document for document?

Engine-neutral, like the partition worker: the same range task runs on Spark (:mod:`sparkindex.verify.spark_tasks`)
or in process, and nothing on the driver grows with the index (tasks return counts and a bounded sample of ids).
The command, its schedule and its history are ``run``; repair's passes are ``repair``; the Spark job is
``spark_tasks``. A sync's gap is reconciled by ``run`` too (:mod:`sparkindex.capture.sync.gaps`).

* ``verifier``: the driver's side: the kinds of drift, key-range tasks of the source (the reindex's partition plan)
  and of the index (its key splits, scanned only when the counts show extra documents), ``verify_alias`` and the
  in-process runner.
* ``range_task``: what a task is given (its range, options) and what a worker holds (``Resources``).
* ``ranges``: one range task (``run_range_task``), dispatching to the steps below.
* ``range_checksums``: a source range's figure (count and summed checks) against the index's, and when an alias can
  be compared so (``checksum_path``).
* ``range_descent``: a range whose figures differ, compared key by key; only differing keys are built.
* ``page_compare``: built documents against the index's copies of their ids (the comparison by id).
* ``index_range``: the index's documents of a sort-key range, looked up in the source (extra documents).
* ``range_repair``: repair's writes for one range.
* ``drift``: what a task sends back: counts and a bounded sample of ids per kind, added up with ``merge``.
"""
