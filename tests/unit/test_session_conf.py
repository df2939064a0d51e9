"""Where a session sparkindex starts gets its conf and its workers' interpreter from.

The workers' interpreter (``PYSPARK_PYTHON`` when the SparkContext starts) is the pipeline's
``spark.pyspark.python``, else spark-submit's, else the environment's ``PYSPARK_PYTHON``, else
the driver's own; under spark-submit its master and ``--conf`` values stand over sparkindex's
defaults, and the pipeline's ``spark.conf`` over them. The rules as a function first, then on real
sessions (in subprocesses: the test session's JVM is already up), started directly and by
spark-submit, whose tasks report which interpreter ran them.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark
import pytest

import sparkindex.__main__ as entry
from sparkindex.config.connections import SparkConfig
from sparkindex.spark.session import DEFAULT_CONF, REINDEX_CONF, session_conf

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
PY = "spark.pyspark.python"


def test_started_directly_the_workers_run_this_interpreter_unless_told_otherwise() -> None:
    conf = session_conf(SparkConfig(master="local[2]"), environ={})
    assert conf[PY] == sys.executable
    assert conf["spark.master"] == "local[2]" and conf["spark.app.name"] == "sparkindex"
    assert {key: conf[key] for key in DEFAULT_CONF} == DEFAULT_CONF

    assert session_conf(SparkConfig(), environ={"PYSPARK_PYTHON": "/opt/env/bin/python"})[PY] == "/opt/env/bin/python"
    pipeline = SparkConfig(conf={PY: "./environment/bin/python", "spark.archives": "env.tar.gz#environment"})
    conf = session_conf(pipeline, environ={"PYSPARK_PYTHON": "/opt/env/bin/python"})
    assert conf[PY] == "./environment/bin/python" and conf["spark.archives"] == "env.tar.gz#environment"


def test_under_spark_submit_its_flags_stand_over_the_defaults_and_the_pipeline_over_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    submitted = {
        "spark.master": "spark://cluster:7077",
        "spark.app.name": "__main__.py",  # spark-submit's name when --name is not given
        "spark.sql.shuffle.partitions": "200",
        "spark.archives": "env.tar.gz#environment",
        PY: "./environment/bin/python",
    }
    conf = session_conf(SparkConfig(), REINDEX_CONF, submitted, environ={"PYSPARK_PYTHON": "/elsewhere/python"})
    assert "spark.master" not in conf, "spark-submit's master stands"
    assert "spark.sql.shuffle.partitions" not in conf and "spark.archives" not in conf, "its --conf values stand"
    assert conf["spark.python.daemon.module"] == DEFAULT_CONF["spark.python.daemon.module"], "defaults fill the rest"
    assert "spark.driver.extraJavaOptions" not in conf, "the driver JVM runs already"
    assert conf[PY] == "./environment/bin/python" and conf["spark.app.name"] == "sparkindex"

    # The pipeline's own spark.conf is set over spark-submit's (Spark: the application's conf over flags).
    pipeline = SparkConfig(master="local[4]", conf={"spark.sql.shuffle.partitions": "16", PY: "/opt/env/bin/python"})
    with caplog.at_level(logging.WARNING, "sparkindex.spark.session"):
        conf = session_conf(pipeline, None, {**submitted, "spark.app.name": "nightly"}, environ={})
    assert conf["spark.sql.shuffle.partitions"] == "16" and conf[PY] == "/opt/env/bin/python"
    assert "spark.master" not in conf and "spark.app.name" not in conf, "--master and --name stand"
    warned = caplog.text
    assert "spark-submit's spark://cluster:7077 is used; the pipeline's local[4] is not" in warned
    assert f"overrides what spark-submit was given: {PY}, spark.sql.shuffle.partitions" in warned

    # Given by the environment only (Spark's own recipe: PYSPARK_PYTHON=./environment/bin/python).
    bare = {"spark.master": "yarn", "spark.app.name": "__main__.py"}
    from_env = session_conf(SparkConfig(), None, bare, environ={"PYSPARK_PYTHON": "./env/bin/python"})
    assert from_env[PY] == "./env/bin/python"
    assert session_conf(SparkConfig(), None, bare, environ={})[PY] == sys.executable


def wrapper(folder: Path, name: str) -> Path:
    """An interpreter that says which it is: this one, with SPARKINDEX_TEST_PYTHON=*name*."""
    path = folder / name
    path.write_text(f'#!/bin/sh\nSPARKINDEX_TEST_PYTHON={name} exec "{sys.executable}" "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


#: which interpreter ran a task, the context's, and the driver's PYSPARK_PYTHON afterwards
REPORT = """
def report(spark):
    import json, os
    ran = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("SPARKINDEX_TEST_PYTHON")).collect()
    print(json.dumps({"task": ran[0], "exec": spark.sparkContext.pythonExec, "env": os.environ.get("PYSPARK_PYTHON"),
                      "master": spark.sparkContext.master, "name": spark.sparkContext.appName,
                      "partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                      "daemon": spark.sparkContext.getConf().get("spark.python.daemon.module")}))
"""

DIRECT = (
    REPORT
    + """
import sys
from sparkindex.config.connections import SparkConfig
from sparkindex.spark.session import build_session

pipeline = SparkConfig(master="local[1]", class_data_sharing=False, conf={"spark.pyspark.python": sys.argv[1]})
report(build_session(pipeline, register=False))
"""
)


@pytest.mark.slow
def test_a_session_started_directly_runs_its_tasks_on_the_pipelines_interpreter(tmp_path: Path) -> None:
    users, pipelines = wrapper(tmp_path, "users"), wrapper(tmp_path, "pipelines")
    script = tmp_path / "direct.py"
    script.write_text(DIRECT, encoding="utf-8")
    env = {**os.environ, "PYSPARK_PYTHON": str(users)}
    run = subprocess.run(
        [sys.executable, str(script), str(pipelines)], capture_output=True, text=True, timeout=300, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert (got["task"], got["exec"]) == ("pipelines", str(pipelines)), "the pipeline's, over PYSPARK_PYTHON"
    assert got["env"] == str(users), "the process's PYSPARK_PYTHON is put back once the context has started"


SUBMITTED = (
    REPORT
    + """
from sparkindex.config.connections import SparkConfig
from sparkindex.spark.session import build_session

report(build_session(SparkConfig(), register=False))  # the pipeline's defaults: master local[*,4], no conf
"""
)


def submit_env() -> dict[str, str]:
    """The environment without PYSPARK_* (make test exports PYSPARK_PYTHON)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_")}
    return {**env, "SPARK_HOME": str(SPARK_HOME)}


@pytest.mark.slow
def test_under_spark_submit_its_master_conf_and_interpreter_are_kept(tmp_path: Path) -> None:
    submitters = wrapper(tmp_path, "submitters")
    script = tmp_path / "submitted.py"
    script.write_text(SUBMITTED, encoding="utf-8")
    env = submit_env()
    run = subprocess.run(
        [
            str(SPARK_SUBMIT),
            "--master",
            "local[1]",
            "--conf",
            "spark.sql.shuffle.partitions=3",
            "--conf",
            f"spark.pyspark.python={submitters}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert (got["master"], got["partitions"], got["task"]) == ("local[1]", "3", "submitters")
    assert got["name"] == "sparkindex" and got["daemon"] == "sparkindex.spark.daemon"


def submit_command(folder: Path, master: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``spark-submit --master <master> <the entry file> <argv>``, the driver on this venv's Python."""
    return subprocess.run(
        [str(SPARK_SUBMIT), "--master", master, entry.__file__, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**submit_env(), "PYSPARK_DRIVER_PYTHON": sys.executable},
        cwd=folder,
    )


@pytest.mark.slow
def test_spark_submit_runs_the_command_and_exits_with_its_code(tmp_path: Path) -> None:
    """The entry file spark-submit runs is the CLI: its usage, its exit codes (2: bad config)."""
    run = submit_command(tmp_path, "local[1]", "check", "-c", str(tmp_path / "none.yaml"))
    assert run.returncode == 2, (run.stdout[-2000:], run.stderr[-2000:])
    assert "none.yaml" in run.stdout + run.stderr


@pytest.mark.slow
def test_under_spark_submit_its_master_decides_what_the_pipeline_may_use(tmp_path: Path) -> None:
    """spark-submit's --master, not the pipeline's default local one, is where tasks run: a SQLite
    store, which executors on other machines cannot share, is refused for it, and the master
    spark-submit already reached is not probed again."""
    (tmp_path / "pipeline.yaml").write_text(
        "source: {url: 'sqlite:///shop.db'}\nindexes: [{alias: products, table: products}]\n", encoding="utf-8"
    )
    run = submit_command(tmp_path, "spark://127.0.0.1:9", "check", "-c", str(tmp_path / "pipeline.yaml"), "--json")
    assert run.returncode == 2, (run.stdout[-2000:], run.stderr[-2000:])
    checks = {c["name"]: c for c in json.loads(run.stdout.strip().splitlines()[-1])["checks"]}
    assert checks["store.cluster"]["status"] == "FAIL", checks
    assert "spark.master is 'spark://127.0.0.1:9'" in checks["store.cluster"]["detail"], checks["store.cluster"]
    assert checks["spark.master"]["status"] == "OK", checks["spark.master"]


def test_run_as_a_file_the_package_folder_leaves_sys_path(tmp_path: Path) -> None:
    """Run as a file, Python puts sparkindex's own folder first on sys.path, where ``config``,
    ``keys`` or ``errors`` would shadow top-level packages of those names."""
    probe = textwrap.dedent(
        """
        import runpy, sys
        sys.argv = [sys.argv[1], "--help"]
        sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]))
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exc:
            print("exit", exc.code, "own folder on path:", __import__("os").path.dirname(sys.argv[0]) in sys.path)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", probe, entry.__file__], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Usage: sparkindex" in run.stdout
    assert run.stdout.strip().splitlines()[-1] == "exit 0 own folder on path: False"
