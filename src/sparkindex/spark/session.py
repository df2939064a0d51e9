"""Creating the SparkSession the way sparkindex needs it, when sparkindex starts it itself.

Python workers must run the project's interpreter (``PYSPARK_PYTHON``) or they import nothing;
Spark's console progress bar is off because the CLI draws its own per-entity progress.

Only a session sparkindex starts is set up this way: :func:`build_session` sets the workers'
interpreter in ``os.environ``, a filter on the root logger and a quieter accumulator server. A
session a caller hands to :mod:`sparkindex.api` (``spark=``) never passes through here, so its
process keeps its environment and logging as they were (see ``sparkindex.api.session``). Even an
own session leaves the process's SIGINT handler alone: PySpark replaces it when a context starts
on the main thread, and neither the CLI's clean stop nor a caller's handler must be lost to that.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from sparkindex.config.connections import SparkConfig

log = logging.getLogger(__name__)

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A task waits for no particular executor: the data is in the database, not in Spark.
    "spark.locality.wait": "0",
    # Workers fork from a daemon that has already imported sparkindex (see spark/daemon.py).
    "spark.python.daemon.module": "sparkindex.spark.daemon",
}

#: For a reindex only: its driver JVM schedules tasks and collects one summary row per partition,
#: so the optimising JIT tier costs seconds of CPU at start-up that it never earns back (measured:
#: session plus first job 11.2 s -> 9.6 s on 2 cores). A user's own DataFrames keep the full JIT.
REINDEX_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def register_data_sources(spark: Any) -> None:
    from sparkindex.spark.reader import SparkIndexSource  # the writer's data source, readable too

    spark.dataSource.register(SparkIndexSource)


def _start(conf: Any, log_path: Path | None) -> Any:
    """The session, the process's SIGINT handler as it was (see the module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        return _start_session(conf, log_path)  # PySpark only installs its handler from the main thread
    handler = signal.getsignal(signal.SIGINT)
    try:
        return _start_session(conf, log_path)
    finally:
        if handler is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, handler)


def _start_session(conf: Any, log_path: Path | None) -> Any:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if log_path is not None and SparkContext._active_spark_context is None:
        from pyspark.java_gateway import launch_gateway

        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_fh:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log_fh, "stderr": log_fh})  # type: ignore[no-untyped-call]
        SparkContext(conf=conf, gateway=gateway)
    return SparkSession.builder.config(conf=conf).getOrCreate()


def _quiet_accumulator_server(sc: Any) -> None:
    """The driver's accumulator server (a ``socketserver`` thread) prints a traceback to the
    user's terminal when the JVM goes away under it, which is how a stop by SIGTERM to the whole
    process group ends (systemd signals every process of the service). The JVM's end is reported
    where it matters, by the calls that fail; this thread's own report is logged, not printed."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(_request: Any, client_address: Any) -> None:
        log.debug("accumulator connection from %s ended: %s", client_address, sys.exc_info()[1])

    server.handle_error = handle_error


#: what py4j logs, on the root logger, for a call whose connection broke before its answer came
PY4J_BROKEN_CALL = "Exception while sending command."


class Py4JBrokenCallAtDebug(logging.Filter):
    """py4j logs a call whose connection broke (the JVM ending under it) at ERROR, with the stack,
    and then raises to the caller anyway: the caller's handling is the report. A stop by SIGTERM to
    the whole process group ends the JVM while the driver still asks it something (the message of
    the exception that stopped the stream), and a clean, acknowledged stop then printed 40 lines of
    py4j frames. That one record is kept at DEBUG, for whoever turns that on; py4j's other reports
    (a callback that failed, a broken protocol) are left as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        from py4j.protocol import Py4JNetworkError  # type: ignore[import-untyped]

        exc = record.exc_info[1] if record.exc_info else None
        if record.msg != PY4J_BROKEN_CALL or not isinstance(exc, Py4JNetworkError):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


def _quiet_py4j_broken_calls() -> None:
    root = logging.getLogger()  # py4j logs it with ``logging.exception``, on the root logger
    if not any(isinstance(f, Py4JBrokenCallAtDebug) for f in root.filters):
        root.addFilter(Py4JBrokenCallAtDebug())


def build_session(
    config: SparkConfig, log_path: Path | None = None, register: bool = True, extra: dict[str, str] | None = None
) -> Any:
    """The session; with *log_path*, the JVM's own output (start-up warnings, log4j) goes there.

    Spark prints warnings to the terminal before any log level can be set (hostname resolution,
    native libraries, incubator modules). The CLI owns the user's terminal, so the JVM is started
    with its stdout and stderr sent to a log file; errors still reach the driver as exceptions.
    """
    _quiet_py4j_broken_calls()  # before the JVM starts: a SIGTERM may end it while it starts
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if config.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError

    conf = SparkConf().setMaster(config.master).setAppName(config.app_name)
    # Executors on a cluster start Python from this conf, not from the driver's environment.
    conf.set("spark.pyspark.python", sys.executable)
    for key, value in {**DEFAULT_CONF, **(extra or {}), **config.conf}.items():
        conf.set(key, value)
    archive = None
    java_options = conf.get("spark.driver.extraJavaOptions") or ""
    if config.class_data_sharing and SparkContext._active_spark_context is None:
        from sparkindex.spark.cds import class_archive

        archive = class_archive()
        conf.set("spark.driver.extraJavaOptions", f"{java_options} {archive.options}".strip())
    try:
        spark = _start(conf, log_path)
    except PySparkRuntimeError:
        if archive is None or archive.archive is None:
            raise
        # A damaged archive keeps the JVM from starting. Start without it; only if that works was
        # the archive at fault (other processes share it), and it is dropped (the next run makes one).
        conf.set("spark.driver.extraJavaOptions", java_options)
        spark = _start(conf, log_path)
        archive.discard()
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_accumulator_server(spark.sparkContext)
    if register:
        register_data_sources(spark)
    return spark
