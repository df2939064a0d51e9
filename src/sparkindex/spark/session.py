"""Creating the SparkSession the way sparkindex needs it.

Python workers must run the project's interpreter (``PYSPARK_PYTHON``) or they import nothing;
Spark's console progress bar is off because the CLI draws its own per-entity progress.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sparkindex.config.model import SparkConfig

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # One task per partition of work; Spark must not bundle them.
    "spark.locality.wait": "0",
}


def register_data_sources(spark: Any) -> None:
    from sparkindex.spark.job_source import JobPartitionsDataSource
    from sparkindex.spark.writer import SparkIndexDataSource

    spark.dataSource.register(JobPartitionsDataSource)
    spark.dataSource.register(SparkIndexDataSource)


def build_session(config: SparkConfig) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(config.master).appName(config.app_name)
    # Executors on a cluster start Python from this conf, not from the driver's environment.
    builder = builder.config("spark.pyspark.python", sys.executable)
    for key, value in {**DEFAULT_CONF, **config.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark
