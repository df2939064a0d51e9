"""sparkindex inside someone else's process: a notebook or a scheduler's worker that owns its
SparkSession, its environment, its logging and its signal handlers.

Each test runs in a process of its own, as that user's would: one that started its session with
plain PySpark (sparkindex never built it), or one where sparkindex starts its own. After
``api.reindex(..., spark=session)`` the process's environment, the root logger's handlers and
filters, the session's conf, the calling thread's job group, the garbage collector's settings and
the signal handlers are exactly as they were before.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROWS = 20

USERS_PROCESS = """
import gc, json, logging, os, signal, sys

os.environ["PYSPARK_PYTHON"] = sys.executable  # the user's own set-up: workers run this interpreter
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[2]")
    .appName("a user's notebook")
    .config("spark.ui.enabled", "false")
    .config("spark.users.own", "kept")
    .getOrCreate()
)
logging.basicConfig(level=logging.INFO, format="user: %(message)s")
root = logging.getLogger()
sc = spark.sparkContext
sc.setJobGroup("users-group", "the user's own work", False)
JOB = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def snapshot():
    return {
        "environ": dict(os.environ),
        "root handlers": [repr(h) for h in root.handlers],
        "root filters": [repr(f) for f in root.filters],
        "root level": root.level,
        "session conf": spark.conf.getAll,
        "job group of this thread": {k: sc.getLocalProperty(k) for k in JOB},
        "gc thresholds": gc.get_threshold(),
        "gc frozen": gc.get_freeze_count(),
        "SIGINT handler": repr(signal.getsignal(signal.SIGINT)),
        "SIGTERM handler": repr(signal.getsignal(signal.SIGTERM)),
    }


before = snapshot()
from sparkindex import api

result = api.reindex(sys.argv[1], spark=spark)
after = snapshot()
print(json.dumps({"outcome": result.outcome, "indexed": result.indexed, "before": before, "after": after}))
"""

OWN_SESSION_PROCESS = """
import json, signal, sys

def users_handler(signum, frame):
    pass

signal.signal(signal.SIGINT, users_handler)
from sparkindex.config.connections import SparkConfig
from sparkindex.spark.session import build_session

spark = build_session(SparkConfig(master="local[1]"))  # as a sync starts its own, on the main thread
print(json.dumps({"kept": signal.getsignal(signal.SIGINT) is users_handler}))
spark.stop()
"""


def tiny_pipeline(folder: Path) -> Path:
    """A one-table SQLite source into Tantivy, whose ``spark`` section a passed session overrides."""
    db = folder / "items.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item {i}") for i in range(ROWS)])
    conn.commit()
    conn.close()
    config = folder / "pipeline.yaml"
    config.write_text(
        f"source:\n  url: sqlite:///{db}\n"
        "target:\n  url: tantivy://index\n"
        "spark:\n  master: local[2]\n  conf: {spark.sql.shuffle.partitions: '3'}\n"
        "indexes:\n  - alias: items\n    table: items\n    partition_size: 1000\n",
        encoding="utf-8",
    )
    return config


def last_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What differs, readably: for the environment only the variables that changed."""
    found: dict[str, Any] = {}
    for key in before:
        if before[key] == after[key]:
            continue
        if key == "environ":
            names = set(before[key]) ^ set(after[key]) | {
                k for k in before[key] if k in after[key] and before[key][k] != after[key][k]
            }
            found[key] = {k: (before[key].get(k), after[key].get(k)) for k in sorted(names)}
        else:
            found[key] = (before[key], after[key])
    return found


@pytest.mark.slow
def test_a_users_session_and_process_are_as_they_were_after_a_reindex(tmp_path: Path) -> None:
    config = tiny_pipeline(tmp_path)
    body = last_json(
        subprocess.run(
            [sys.executable, "-c", USERS_PROCESS, str(config)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    )
    assert (body["outcome"], body["indexed"]) == ("DONE", ROWS), body
    assert body["before"]["session conf"].get("spark.users.own") == "kept"
    assert "spark.sql.shuffle.partitions" not in body["before"]["session conf"] or (
        body["before"]["session conf"]["spark.sql.shuffle.partitions"] != "3"
    ), "the test needs a session that does not already hold the pipeline's conf"
    assert changed(body["before"], body["after"]) == {}


@pytest.mark.slow
def test_a_session_sparkindex_starts_leaves_the_processs_sigint_handler(tmp_path: Path) -> None:
    body = last_json(
        subprocess.run(
            [sys.executable, "-c", OWN_SESSION_PROCESS], cwd=tmp_path, capture_output=True, text=True, timeout=600
        )
    )
    assert body == {"kept": True}, "PySpark's handler replaced the process's own"
