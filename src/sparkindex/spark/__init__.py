"""Spark integration: the session, the partition job's task functions and the ``sparkindex`` data source.

Verify's Spark job is :mod:`sparkindex.verify.spark_tasks`; the change stream is :mod:`sparkindex.capture.stream`.

Spark executes; it decides no policy. Documents never cross into the JVM: a task runs in one Python worker process
and returns small summary rows. The pipeline travels inside the pickled task function, never in Spark options, so
secrets stay out of the UI and the event logs. Plans are resolved once by the driver and shipped in the tasks, so a
worker builds every document from the plan the job was fingerprinted with. Apply and verify tasks return the
errors they can classify as data, so the driver gets their class back, not a traceback's text.

* ``session``: the SparkSession factory (the project's interpreter for workers, JVM output to a log file) and the
  data sources' registration.
* ``cds``: the driver JVM's class-data archive, written by a first run and adopted by later ones.
* ``daemon``: PySpark's worker daemon with sparkindex imported, and the collector and allocator tuned, before it
  forks.
* ``context``: per-worker caches (store, source, target), kept for the worker process's life; a ``WorkerContext``
  the driver makes for a while (the head start) closes the source and target it opened. ``WorkerContext.builders``
  makes builders from the shipped plans, cached per (plan key, alias).
* ``partition_job``: a job's partitions as one ``mapInArrow`` job, one queue-worker task per slot claiming in
  claim order. ``PartitionTasks`` carries the plans and the fingerprint.
* ``task_errors``: classified errors sent in result rows (:func:`sparkindex.errors.to_wire`) and raised again on
  the driver (``raise_returned``, through ``from_wire``).
* ``writer``: ``df.write.format("sparkindex")``: any DataFrame to any target, through the bulk loop.
* ``reader``: ``spark.read.format("sparkindex")``: an index as a DataFrame, sliced by the target's key splits.
* ``target_options``: the reader's and writer's ``target.<key>`` options, and ``target.<key>_env`` for secrets.
"""

from sparkindex.spark.session import build_session, register_data_sources

__all__ = ["build_session", "register_data_sources"]
