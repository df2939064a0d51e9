"""Verification: does the index behind an alias equal the source, document for document?

Engine-neutral, like the partition worker: the same range task runs on Spark (:mod:`sparkindex.verify.spark_tasks`)
or in process, and nothing on the driver grows with the index (tasks return counts and a bounded sample of ids).
The command, its schedule and its history are :mod:`sparkindex.verify.run`; repair's passes are
:mod:`sparkindex.verify.repair`. The sync's range rescans cut their ranges with this planner, so this sits below
``changes``.

* ``verifier``: the driver's side: the kinds of drift, key-range tasks of the source (the reindex's partition plan)
  and of the index (its key splits, scanned only when the counts show extra documents), ``verify_alias`` and the
  in-process runner.
* ``ranges``: one range task (``run_range_task``). A source range is compared by the index's hashes of its ids, an
  index range by source lookups; with repair, the task fixes what it finds.
* ``drift``: what a task sends back: counts and a bounded sample of ids per kind, added up with ``merge``.
"""
