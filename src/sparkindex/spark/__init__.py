"""Spark integration: the session factory and the Python data sources.

* ``sparkindex_job``: a batch reader whose partitions are a job's pending partitions;
* ``sparkindex``: a writer for any DataFrame (and for the job reader's output).
"""

from sparkindex.spark.session import build_session, register_data_sources

__all__ = ["build_session", "register_data_sources"]
