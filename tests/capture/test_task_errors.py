"""Errors cross the Spark boundary as data: a task's error reaches the driver as its own class,
with its fields, not as a class name inside a traceback's text (spark/task_errors.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.capture.stream import SUMMARY_DDL, ApplyTasks
from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from sparkindex.errors import (
    DocumentError,
    LockLost,
    LogGap,
    PermanentError,
    SparkIndexError,
    TransientError,
    UsageError,
    from_wire,
    to_wire,
)
from sparkindex.sources.change_model import STREAM_DDL, Change, end_row
from sparkindex.spark.task_errors import classify, raise_returned


def test_an_error_comes_back_as_its_class_with_its_fields() -> None:
    gap = LogGap("the slot is gone", alias="products", stored=120, available=450)
    back = from_wire(to_wire(gap))
    assert type(back) is LogGap and isinstance(back, PermanentError)
    assert (str(back), back.alias, back.stored, back.available) == (str(gap), "products", 120, 450)
    doc = from_wire(to_wire(DocumentError("p|1", "too deep", "MapperParsingError")))
    assert isinstance(doc, DocumentError)
    assert (doc.doc_id, doc.reason, doc.error_class) == ("p|1", "too deep", "MapperParsingError")
    assert type(from_wire(to_wire(LockLost("fenced off")))) is LockLost
    assert from_wire(to_wire(UsageError("no alias"))).exit_code == 2


def test_a_class_unknown_where_it_is_read_keeps_the_nearest_known_class_above_it() -> None:
    class StillTransient(TransientError):  # as worker/bulk.py's ItemsStillTransient, not imported here
        pass

    wire = to_wire(StillTransient("429 after every retry"))
    assert wire["above"] == ["TransientError", "SparkIndexError"]
    wire["class"] = "ItemsStillTransientFromAWorker"  # a name this process has never imported
    back = from_wire(wire)
    assert type(back) is TransientError, "a transient error must not become permanent on the way back"
    assert str(back) == "ItemsStillTransientFromAWorker: 429 after every retry"


def test_an_unknown_class_is_permanent_and_named() -> None:
    back = from_wire({"class": "FromANewerWorker", "message": "boom", "fields": {}})
    assert type(back) is PermanentError
    assert "FromANewerWorker: boom" in str(back)


@pytest.mark.postgres
def test_sql_the_server_refuses_is_permanent_and_a_lost_connection_is_not(services: dict[str, str]) -> None:
    engine = sa.create_engine(normalize_url(services["postgres"]))
    try:
        with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as refused:
            conn.exec_driver_sql("SELECT no_such_column FROM pg_class")
    finally:
        engine.dispose()
    error = classify(refused.value)
    assert isinstance(error, PermanentError) and "no_such_column" in str(error)
    unreachable = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 2})
    with pytest.raises(sa.exc.OperationalError) as lost:
        unreachable.connect()
    assert classify(lost.value) is None  # unclassified: the driver retries it
    assert classify(TransientError("429")) is None  # escapes: Spark retries the task


def test_a_task_error_reaches_the_driver_as_its_class(tmp_path: Path, spark: Any) -> None:
    """A real apply task in a Python worker, shipped no plan for the alias it must apply to."""
    generate_shop(tmp_path / "shop.db", 20)
    (tmp_path / "pipeline.yaml").write_text(PIPELINE_YAML.format(partition_size=100), encoding="utf-8")
    pipeline = load_pipeline(tmp_path / "pipeline.yaml")
    change = Change(table="products", op="update", position=7, old=None, new={"id": 1}, ts=1.0)
    batch = spark.createDataFrame([change.to_row(), end_row({"at": 7}, 7, 1.0)], STREAM_DDL)
    run = {"job_id": "sync:t", "group": "t"}
    tasks = ApplyTasks(pipeline.wire_string(), run, {"products": ("products-v1", 0)}, {}, "run-1")
    rows = batch.coalesce(1).mapInArrow(tasks, SUMMARY_DDL).collect()
    with pytest.raises(SparkIndexError) as raised:
        raise_returned(rows)
    # the worker's own error, as raised there: not the JVM's text with a traceback inside
    assert type(raised.value) is PermanentError, raised.value
    assert str(raised.value) == "no document plan was shipped for alias 'products' (shipped: none)"


def test_a_verify_task_error_reaches_the_driver_as_its_class(tmp_path: Path, spark: Any) -> None:
    from sparkindex.verify.ranges import RangeTask, TaskOptions
    from sparkindex.verify.spark_tasks import run_verify_tasks

    generate_shop(tmp_path / "shop.db", 20)
    (tmp_path / "pipeline.yaml").write_text(PIPELINE_YAML.format(partition_size=100), encoding="utf-8")
    pipeline = load_pipeline(tmp_path / "pipeline.yaml")
    with pytest.raises(PermanentError) as raised:
        run_verify_tasks(spark, pipeline, [RangeTask("products", "products-v1", "source")], TaskOptions(), {})
    assert str(raised.value) == "no document plan was shipped for alias 'products' (shipped: none)"
