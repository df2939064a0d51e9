"""Verification: does the index behind an alias equal the source, document for document?

Engine-neutral, like the partition worker: the same range task runs on Spark (:mod:`sparkindex.verify.spark_tasks`)
or in process, and nothing on the driver grows with the index (tasks return counts and a bounded sample of ids).
The command, its schedule and its history are ``run``; repair's passes are ``repair``; the Spark job is
``spark_tasks``. A sync's gap is reconciled by ``run`` too (:mod:`sparkindex.capture.sync.gaps`).

* ``verifier``: the driver's side: the kinds of drift, key-range tasks of the source (the reindex's partition plan)
  and of the index (its key splits, scanned only when the counts show extra documents), ``verify_alias`` and the
  in-process runner.
* ``ranges``: one range task (``run_range_task``). A source range is compared by the index's hashes of its ids, an
  index range by source lookups; with repair, the task fixes what it finds.
* ``drift``: what a task sends back: counts and a bounded sample of ids per kind, added up with ``merge``.
"""
