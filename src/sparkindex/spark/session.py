"""Creating the SparkSession the way sparkindex needs it, when sparkindex starts it itself.

Python workers must run an interpreter with sparkindex installed or they import nothing; Spark's
console progress bar is off because the CLI draws its own per-entity progress.

**The workers' interpreter** (what executors start Python with: the ``PYSPARK_PYTHON`` that the
driver's SparkContext reads once, when it starts) is, the first that is set:

1. ``spark.pyspark.python`` in the pipeline's ``spark.conf``;
2. ``spark.pyspark.python`` given to spark-submit (``--conf``, ``spark-defaults.conf``);
3. the environment's ``PYSPARK_PYTHON`` (spark-submit's recipe for a packed environment:
   ``PYSPARK_PYTHON=./environment/bin/python spark-submit --archives env.tar.gz#environment``);
4. this process's own interpreter, ``sys.executable``: right wherever executors see the same
   path (a local master, or a cluster whose machines share the installation).

A relative path such as ``./environment/bin/python`` names the copy of an archive (``--archives``,
``spark.archives``) that Spark unpacks in each executor's working directory; docs/deploy.md has the
recipes. The variable is set only while the context starts, then put back as it was.

**Under spark-submit** (this process is the Python driver that spark-submit started: its JVM runs
already and holds spark-submit's conf) the flags given to spark-submit keep their place: its master
and deploy mode are used (the pipeline's ``spark.master`` is not), its ``--conf`` values win over
sparkindex's defaults, and only the pipeline's own ``spark.conf`` is set over them (Spark's order:
properties set by the application over flags, flags over ``spark-defaults.conf``). The driver JVM
runs already, so no class-data archive and no driver JVM options are applied.

Only a session sparkindex starts is set up this way: :func:`build_session` sets the workers'
interpreter, a filter on the root logger and a quieter accumulator server. A session a caller
hands to :mod:`sparkindex.api` (``spark=``) never passes through here, so its process keeps its
environment and logging as they were (see ``sparkindex.api.session``). Even an own session leaves
the process's SIGINT handler alone: PySpark replaces it when a context starts on the main thread,
and neither the CLI's clean stop nor a caller's handler must be lost to that.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
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


#: The property and the variable that name the workers' interpreter.
PYTHON_KEY = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"
#: Properties that only take effect when the driver JVM starts: under spark-submit it runs already.
DRIVER_JVM_KEYS = frozenset({"spark.driver.extraJavaOptions"})


def submitted_conf() -> dict[str, str] | None:
    """spark-submit's conf when this process is the Python driver spark-submit started; else None.

    spark-submit starts the driver JVM first (with ``--master``, ``--conf``, ``--archives`` and
    ``spark-defaults.conf`` as its system properties), then this process, which it tells where
    the JVM's gateway listens (``PYSPARK_GATEWAY_PORT``). Connecting to it starts nothing.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's gateway; installs no handler
    return {str(key): str(value) for key, value in SparkConf().getAll()}  # loads the JVM's properties


def effective_master(config: SparkConfig) -> str:
    """Where this run's tasks go: spark-submit's master when spark-submit started this process
    (it chose where the driver and its executors run), else the pipeline's ``spark.master``.
    What depends on it (the SQLite store's refusal, the driver's head start) asks here."""
    submitted = submitted_conf()
    return (submitted or {}).get("spark.master") or config.master


def workers_python(config: SparkConfig, submitted: dict[str, str] | None, environ: Mapping[str, str]) -> str:
    """The interpreter executors start Python with: the first that is set of the pipeline's
    ``spark.pyspark.python``, spark-submit's, ``PYSPARK_PYTHON``, and this process's own."""
    for value in (config.conf.get(PYTHON_KEY), (submitted or {}).get(PYTHON_KEY), environ.get(PYTHON_ENV)):
        if value:
            return value
    return sys.executable


def session_conf(
    config: SparkConfig,
    extra: Mapping[str, str] | None = None,
    submitted: dict[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every property sparkindex sets on the session's SparkConf (the module docstring says in
    which order). Under spark-submit (*submitted*: its conf), what it was given is left out, so the
    JVM's value stands, except where the pipeline's own ``spark.conf`` names the property."""
    own = {**DEFAULT_CONF, **(extra or {})}
    conf: dict[str, str] = {}
    if submitted is None:
        conf["spark.master"] = config.master
        conf["spark.app.name"] = config.app_name
    else:
        own = {key: value for key, value in own.items() if key not in submitted and key not in DRIVER_JVM_KEYS}
        master = submitted.get("spark.master")
        if master is None:
            conf["spark.master"] = config.master
        elif "master" in config.model_fields_set and config.master != master:
            log.warning(
                "spark.master: spark-submit's %s is used; the pipeline's %s is not (spark-submit chose where the "
                "driver and its executors run)",
                master,
                config.master,
            )
        name = submitted.get("spark.app.name", "")
        if not name or name.endswith(".py"):  # spark-submit's default name: the file it runs
            conf["spark.app.name"] = config.app_name
        overridden = sorted(key for key, value in config.conf.items() if submitted.get(key, value) != value)
        if overridden:
            log.warning("spark.conf of the pipeline overrides what spark-submit was given: %s", ", ".join(overridden))
    conf.update(own)
    conf.update(config.conf)
    conf[PYTHON_KEY] = workers_python(config, submitted, os.environ if environ is None else environ)
    return conf


#: one session start at a time sets and restores the process's environment (sessions start on
#: background threads: two overlapping windows would restore each other's values)
_ENV_WINDOW = threading.Lock()


@contextlib.contextmanager
def _workers_python_env(python: str) -> Iterator[None]:
    """``PYSPARK_PYTHON`` (which a SparkContext reads once, when it starts, for every Python
    function it ships) set to *python* while the session starts, then as it was."""
    with _ENV_WINDOW:
        saved = {name: os.environ.get(name) for name in (PYTHON_ENV, "PYSPARK_DRIVER_PYTHON")}
        os.environ[PYTHON_ENV] = python
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def build_session(
    config: SparkConfig, log_path: Path | None = None, register: bool = True, extra: dict[str, str] | None = None
) -> Any:
    """The session; with *log_path*, the JVM's own output (start-up warnings, log4j) goes there.

    Spark prints warnings to the terminal before any log level can be set (hostname resolution,
    native libraries, incubator modules). The CLI owns the user's terminal, so the JVM is started
    with its stdout and stderr sent to a log file; errors still reach the driver as exceptions.
    Under spark-submit the JVM runs already, and its output goes where spark-submit sends it.
    """
    _quiet_py4j_broken_calls()  # before the JVM starts: a SIGTERM may end it while it starts
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError

    submitted = submitted_conf()
    values = session_conf(config, extra, submitted)
    if values.get("spark.master", (submitted or {}).get("spark.master", "")).startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf()
    for key, value in values.items():
        conf.set(key, value)
    archive = None
    java_options = conf.get("spark.driver.extraJavaOptions") or ""
    if config.class_data_sharing and submitted is None and SparkContext._active_spark_context is None:
        from sparkindex.spark.cds import class_archive

        archive = class_archive()
        conf.set("spark.driver.extraJavaOptions", f"{java_options} {archive.options}".strip())
    log_path = log_path if submitted is None else None  # spark-submit's JVM writes where spark-submit says
    with _workers_python_env(values[PYTHON_KEY]):
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
