"""Spark: the master answers (a TCP connect to each ``spark://`` address: the master's RPC port
accepts connections long before a job could tell) and the JVM is Java 17 or 21, the versions
Spark 4 runs on. Without this, a missing Java surfaces as "Java gateway process exited" and a
master that is down as a session that hangs while it retries.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

from sparkindex.config.model import Pipeline
from sparkindex.preflight.model import Check, Options, fail, ok, warn
from sparkindex.spark.session import submitted_conf

SUPPORTED_JAVA = (17, 21)
JAVA_FIX = "install Java 17 (apt-get install openjdk-17-jre-headless), or set JAVA_HOME to a Java 17 or 21"
MASTER_FIX = (
    "start the master (spark-class org.apache.spark.deploy.master.Master) and its workers, or correct spark.master"
)


def check_spark(pipeline: Pipeline, options: Options) -> list[Check]:
    if options.session_master is not None:  # the caller's session runs already: nothing to reach or start
        return [ok("spark.master", f"{options.session_master}: the caller's SparkSession")]
    submitted = submitted_conf()
    if submitted is not None and submitted.get("spark.master"):  # spark-submit started this driver: it runs
        return [ok("spark.master", f"{submitted['spark.master']}: spark-submit's")]
    master = _master(pipeline.spark.master, options.connect_timeout_s)
    if options.scope != "check":  # a run starts the JVM moments later: no second JVM start-up before it
        return [master]
    return [master, _java(options.connect_timeout_s)]


def _master(master: str, timeout_s: float) -> Check:
    name = "spark.master"
    if master.startswith("local"):
        return ok(name, f"{master}: Spark runs inside this process")
    if not master.startswith("spark://"):
        return warn(name, f"{master}: not probed (only spark:// masters are)", None)
    errors = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return ok(name, f"{master}: {address} accepts connections")
        except (OSError, ValueError) as exc:
            errors.append(f"{address}: {exc}")
    return fail(name, f"{master}: no master answers ({'; '.join(errors)})", MASTER_FIX, transient=True)


def java_binary() -> str | None:
    """The java that PySpark starts: ``$JAVA_HOME/bin/java``, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _java(timeout_s: float) -> Check:
    name = "spark.java"
    binary = java_binary()
    if binary is None:
        return fail(name, "no java on PATH and JAVA_HOME is not set", JAVA_FIX)
    try:
        done = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=max(10.0, timeout_s * 2))
    except subprocess.TimeoutExpired as exc:  # a loaded machine, not a missing Java: never stops a run
        return fail(name, f"{binary} -version did not answer: {exc}", "check again", transient=True)
    except OSError as exc:
        return fail(name, f"{binary} does not run: {exc}", JAVA_FIX)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if done.returncode != 0 or found is None:
        return fail(name, f"{binary} -version says no version: {(done.stderr or done.stdout).strip()[:200]}", JAVA_FIX)
    major = int(found[1]) if found[1] != "1" else int(found[2] or 0)  # 1.8 is Java 8
    if major < SUPPORTED_JAVA[0]:
        return fail(name, f"{binary} is Java {major}; Spark 4 needs Java 17 or 21", JAVA_FIX)
    if major not in SUPPORTED_JAVA:
        return warn(name, f"{binary} is Java {major}; Spark 4 is tested on Java 17 and 21", JAVA_FIX)
    return ok(name, f"{binary} is Java {major}")
