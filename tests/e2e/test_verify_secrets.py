"""Verify and repair carry the pipeline (and its secrets) to Spark inside the pickled task
function, never in Spark options or plans, and record nothing secret in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_store
from sparkindex.verify.ranges import RangeTask, TaskOptions
from sparkindex.verify.run import run_verify
from sparkindex.verify.spark_tasks import verify_frame
from tests.e2e.guarantee_helpers import pg_table, write_pipeline

PASSWORD = "V3rifyS3cret"


@pytest.mark.postgres
@pytest.mark.slow
def test_verify_keeps_secrets_out_of_spark_and_the_store(tmp_path: Path, spark: Any, services: dict[str, str]) -> None:
    url = f"postgresql://sparkindex:{PASSWORD}@127.0.0.1:55432/sparkindex"  # trust auth accepts any password
    rows = [(i, f"item {i}") for i in range(1, 301)]
    with pg_table(services["postgres"], "id integer PRIMARY KEY, name text NOT NULL", rows, "vsecret") as table:
        pipeline = write_pipeline(tmp_path, url, "items", table, "    partition_size: 100\n")
        assert PASSWORD in pipeline.wire_string(), "the test must carry the secret into the job"
        assert ReindexJob(pipeline, spark_factory=lambda: spark).run().status == "COMPLETED"
        outcome = run_verify(pipeline, repair_drift=True, spark_factory=lambda: spark)
        assert outcome.clean and outcome.reports[0].checked == 300

        df = verify_frame(spark, pipeline, [RangeTask("items", "items_v1", "source")], TaskOptions(), {})
        plan_text = df._jdf.queryExecution().toString()
        assert "mapinarrow" in plan_text.lower() and PASSWORD not in plan_text

    conf = spark.sparkContext.getConf().getAll()
    assert not [(k, v) for k, v in conf if PASSWORD in k or PASSWORD in v]
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    for i in range(executions.size()):
        e = executions.apply(i)
        for text in (e.description(), e.details(), e.physicalPlanDescription()):
            assert PASSWORD not in text
    with open_store(pipeline) as store:
        [run] = store.verify_runs.list("items")
    assert PASSWORD not in str(run.to_dict())
