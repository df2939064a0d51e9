"""Spark integration: the session factory, the job's partition tasks and the DataFrame writer.

* :func:`partition_job.run_partitions`: a job's partitions as one Spark job, one queue-worker task per slot;
* ``sparkindex``: a writer for any DataFrame (``df.write.format("sparkindex")``).
"""

from sparkindex.spark.session import build_session, register_data_sources

__all__ = ["build_session", "register_data_sources"]
