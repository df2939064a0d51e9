"""One-line summaries of errors that crossed Spark: a Python worker's traceback arrives inside the
JVM's message, and the line the operator reads must carry its cause, not the word "Traceback"
(the chaos campaign flagged a sync whose restart warning printed one)."""

from __future__ import annotations

from sparkindex.capture.sync_errors import brief

SPARK_WRAPPED = (
    "[STREAM_FAILED] Query [id = 7493c29f, runId = 4b9070ce] terminated with exception: "
    "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
    "latestOffset: Traceback (most recent call last):\n"
    '  File "/venv/sparkindex/spark/stream.py", line 120, in latestOffset\n'
    "    return self._source.head()\n"
    "psycopg.OperationalError: consuming input failed: server closed the connection unexpectedly\n"
    "\tThis probably means the server terminated abnormally\n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/sparkindex/sources/postgres/changes.py", line 88, in head\n'
    "    raise TransientError(...) from exc\n"
    "sparkindex.errors.TransientError: checking slot 's1': consuming input failed: server closed the connection\n"
    "\n"
    "JVM stacktrace:\n"
    "org.apache.spark.SparkException: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed\n"
    "\tat org.apache.spark.sql.execution.python.PythonStreamingSourceRunner.latestOffset(X.scala:1)\n"
)


def test_a_wrapped_python_traceback_is_summarised_by_its_last_exception() -> None:
    line = brief(Exception(SPARK_WRAPPED))
    assert "Traceback" not in line
    assert line.startswith("[STREAM_FAILED]")
    assert "latestOffset" in line
    assert line.endswith(
        "sparkindex.errors.TransientError: checking slot 's1': consuming input failed: server closed the connection"
    )
    assert "\n" not in line


def test_a_plain_error_keeps_its_first_line() -> None:
    assert brief(ValueError("bad value\nmore detail")) == "bad value"
    assert brief(ValueError("")) == "ValueError"


def test_a_traceback_without_an_exception_line_keeps_the_head_only() -> None:
    line = brief(Exception('something failed: Traceback (most recent call last):\n  File "x", line 1'))
    assert line == "something failed" and "Traceback" not in line
