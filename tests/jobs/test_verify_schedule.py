"""``verify: {every: 24h}``: the scheduled check serve and sync call, its record, its lock; and
``status`` saying plainly that no job has run, with the last verify beside the job."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.recovery import holder_name
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import ConfigError
from sparkindex.resources import open_source_url, open_store
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.run import SCHEDULE_LOCK, next_verify_at, run_scheduled_verify, run_verify
from sparkindex.verify.verifier import Runner
from tests.e2e.guarantee_helpers import run_cli
from tests.e2e.shop import make_shop
from tests.jobs.planting import index_without_spark, tantivy


def scheduled_shop(tmp_path: Path, every: str | None) -> Pipeline:
    make_shop(tmp_path, products=50, partition_size=25, extra_yaml=f"verify:\n  every: {every}\n" if every else "")
    return load_pipeline(tmp_path / "pipeline.yaml")


@contextlib.contextmanager
def in_process(pipeline: Pipeline) -> Iterator[Runner]:
    """Verify's ranges run in this process, over a source, target and store open for the block."""
    with (
        open_source_url(pipeline.source_url()) as source,
        tantivy(pipeline) as target,
        open_store(pipeline) as store,
    ):
        plans = {a: p for a, (p, _) in resolve_plans(pipeline, source, ["products"]).items()}
        yield local_runner(LocalResources(source, target, plans, store))


def test_the_scheduled_check_runs_when_due_once_and_is_recorded(tmp_path: Path) -> None:
    pipeline = scheduled_shop(tmp_path, "1h")
    assert pipeline.verify.every == 3600
    index_without_spark(pipeline, "products")
    with in_process(pipeline) as runner, open_store(pipeline) as store:
        before = time.time()
        assert next_verify_at(pipeline) is not None and next_verify_at(pipeline) <= time.time(), "never run: due"  # type: ignore[operator]

        outcome = run_scheduled_verify(pipeline, runner=runner)
        assert outcome is not None and outcome.clean and outcome.reports[0].checked == 50
        last = store.verify_runs.latest("products", trigger="scheduled")
        assert last is not None and (last.run_id, last.status, last.checked, last.repair) == (
            outcome.run_id,
            "clean",
            50,
            False,
        )
        due = next_verify_at(pipeline)
        assert due is not None and before + 3600 <= due <= time.time() + 3600

        assert run_scheduled_verify(pipeline, runner=runner) is None, "not due for an hour"
        assert len(store.verify_runs.list("products")) == 1


def test_a_check_another_process_runs_is_skipped(tmp_path: Path) -> None:
    pipeline = scheduled_shop(tmp_path, "30m")
    index_without_spark(pipeline, "products")
    key = SCHEDULE_LOCK.format(aliases="products")
    with open_store(pipeline) as store, in_process(pipeline) as runner:
        token = store.locks.acquire(key, holder_name("other-run"), 600)  # a live holder: this very process
        assert run_scheduled_verify(pipeline, runner=runner, force=True) is None
        assert store.verify_runs.list() == []
        store.locks.release(key, token)
        assert run_scheduled_verify(pipeline, runner=runner, force=True) is not None


def test_without_a_schedule_nothing_runs(tmp_path: Path) -> None:
    pipeline = scheduled_shop(tmp_path, None)
    assert next_verify_at(pipeline) is None
    with in_process(pipeline) as runner:
        assert run_scheduled_verify(pipeline, runner=runner, force=True) is None


@pytest.mark.parametrize("bad", ["soon", "0h", "-2h", "24 hours"])
def test_a_bad_schedule_is_a_config_error_naming_the_key(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"verify\.every") as err:
        scheduled_shop(tmp_path, bad)
    assert err.value.exit_code == 2


def test_status_without_a_job_says_so_and_shows_the_last_verify(tmp_path: Path, cli: Path) -> None:
    pipeline = scheduled_shop(tmp_path, None)
    config = str(tmp_path / "pipeline.yaml")
    run = run_cli(cli, "status", "-c", config)
    assert run.returncode == 0, run.stderr
    assert "no reindex job has run for products yet" in run.stderr and run.stdout == ""
    run = run_cli(cli, "status", "-c", config, "--json")
    body = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert (body["job_id"], body["status"], body["verify"]) == (None, None, {})
    assert "no reindex job" in body["message"]

    index_without_spark(pipeline, "products")
    with in_process(pipeline) as runner:
        outcome = run_verify(pipeline, runner=runner, trigger="api")
    body = orjson.loads(run_cli(cli, "status", "-c", config, "--json").stdout.strip().splitlines()[-1])
    assert body["verify"]["products"]["run_id"] == outcome.run_id
    assert (body["verify"]["products"]["trigger"], body["verify"]["products"]["status"]) == ("api", "clean")
