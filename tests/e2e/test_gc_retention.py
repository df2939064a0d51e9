"""``sparkindex gc``: what goes, and the two refusals (a running job, an alias's current index);
the transform cache of aliases that are gone.

On every coordination store (SQLite, PostgreSQL, MariaDB) with a real Tantivy target. Times are
set in the store by hand (a job's clock, a resolution's), so ages need no waiting.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.coordination.records import PartitionSpec
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.verify_runs import COUNTS, VerifyRun
from sparkindex.jobs.gc import collect_garbage
from sparkindex.resources import open_store
from tests.e2e.guarantee_helpers import run_cli
from tests.e2e.shop import make_shop
from tests.jobs.planting import tantivy

DAY = 86400.0
J = JobStatus
MAPPING = {"properties": {"name": {"type": "text"}}}


def pipeline_on(tmp_path: Path, url: str, prefix: str) -> Pipeline:
    make_shop(tmp_path, products=5, partition_size=5)
    path = tmp_path / "pipeline.yaml"
    text = path.read_text(encoding="utf-8")
    assert "coordination:\n  url: sqlite:///.sparkindex/state.db\n" in text
    store_yaml = f"coordination:\n  url: {url}\n  prefix: '{prefix}'\n"
    text = text.replace("coordination:\n  url: sqlite:///.sparkindex/state.db\n", store_yaml)
    path.write_text(text.replace("job:\n", "job:\n  keep_versions: 1\n", 1), encoding="utf-8")
    return load_pipeline(path)


def job_in(
    store: CoordinationStore,
    path: list[J],
    age_days: float,
    targets: dict[str, str] | None = None,
    alias: str = "products",
) -> str:
    """A job of *alias* walked along *path*, two partitions, its clocks *age_days* old."""
    job = store.job_rows.create_job([alias], {"aliases": [alias]}, "test")
    specs = [PartitionSpec(alias, i, None, None, 10, 10, 0) for i in range(2)]
    store.partition_rows.add_partitions(job.id, specs)
    for status in path:
        store.job_rows.transition_job(job.id, status)
    if targets:
        store.job_rows.update_job(job.id, targets=targets)
    when = time.time() - age_days * DAY
    jt = store.t.job
    with store.engine.begin() as conn:
        conn.execute(jt.update().where(jt.c.id == job.id).values(updated_at=when, completed_at=when))
    return job.id


def age_resolutions(store: CoordinationStore, doc_id: str, age_days: float) -> None:
    rt = store.dead_letters.resolved_t
    with store.engine.begin() as conn:
        conn.execute(rt.update().where(rt.c.doc_id == doc_id).values(resolved_at=time.time() - age_days * DAY))


def verify_run(alias: str, run_id: str, age_days: float) -> VerifyRun:
    when = time.time() - age_days * DAY
    zero: dict[str, Any] = dict.fromkeys(COUNTS, 0)
    return VerifyRun(run_id, alias, None, "cli", False, "clean", **zero, started_at=when, finished_at=when)


def cache_entries(store: CoordinationStore, alias: str, n: int, age_days: float = 0) -> None:
    """*n* transform-cache entries of *alias*, written *age_days* ago."""
    store.transform_cache.put(alias, [(f"doc-{i}", "h", b'{"set":{},"unset":[]}') for i in range(n)])
    tc = store.t.transform_cache
    with store.engine.begin() as conn:
        conn.execute(tc.update().where(tc.c.alias == alias).values(updated_at=time.time() - age_days * DAY))


def remaining_jobs(store: CoordinationStore) -> dict[str, tuple[JobStatus, int]]:
    return {j.id: (j.status, len(store.partition_rows.partitions(j.id))) for j in store.job_rows.jobs()}


def test_gc_deletes_what_is_old_and_refuses_running_jobs_and_current_indexes(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    pipeline = pipeline_on(tmp_path, *store_url)
    with open_store(pipeline) as store, tantivy(pipeline) as target:
        v1, v2, v3, v4 = (target.create_version("products", MAPPING) for _ in range(4))
        target.swap("products", v1, None)  # the alias stays on the oldest: v4 is the newest

        done = job_in(store, [J.READY, J.RUNNING, J.COMPLETED], 40)
        dead = job_in(store, [J.FAILED], 40)  # beyond recovery_max_age_s: no rerun resumes it
        running = job_in(store, [J.READY, J.RUNNING], 40, {"products": v2})
        young = job_in(store, [J.READY, J.RUNNING, J.COMPLETED_WITH_ERRORS], 1)
        foreign = job_in(store, [J.READY, J.RUNNING, J.COMPLETED], 40, alias="elsewhere")  # another pipeline's

        store.dead_letters.add(
            "job-x", "products", None, [("a", "E", "still failing"), ("b", "E", "x"), ("c", "E", "y")]
        )
        store.dead_letters.add("job-y", "elsewhere", None, [("z", "E", "another pipeline's")])
        letters = {d.doc_id: d for d in store.dead_letters.list()}
        assert store.dead_letters.resolve([letters["b"], letters["c"], letters["z"]], "redriven") == 3
        age_resolutions(store, "b", 40)
        age_resolutions(store, "z", 40)
        runs = store.verify_runs
        runs.record(
            [verify_run("products", "r1", 40), verify_run("products", "r2", 35), verify_run("products", "r3", 0)]
        )
        runs.record([verify_run("gone-alias", "r4", 40)])

        for job_id in (done, running):  # the fence log of each job's swap
            store.swap_log.finish(store.swap_log.begin("products", "products_v9", None, 1, job_id), "moved")

        preview = collect_garbage(pipeline, 30 * DAY, dry_run=True)
        assert {a.job_id for a in store.swap_log.attempts()} == {done, running}, "a dry run deletes nothing"
        report = collect_garbage(pipeline, 30 * DAY)
        for r in (preview, report):
            assert (r.jobs_deleted, r.partitions_deleted, r.dead_letters_deleted, r.verify_runs_deleted) == (2, 4, 1, 2)
            assert sorted(r.job_ids) == sorted([done, dead]) and r.versions_deleted == [v3]
            kept = {(k.what, k.name): k.reason for k in r.kept}
            assert kept == {
                ("job", running): "RUNNING: running jobs are never deleted",
                ("index", v1): "the current index of alias 'products'",
                ("index", v2): f"job {running} is building or may resume it",
            }
        assert remaining_jobs(store) == {
            running: (J.RUNNING, 2),
            young: (J.COMPLETED_WITH_ERRORS, 2),
            foreign: (J.COMPLETED, 2),
        }
        assert target.list_versions("products") == [v1, v2, v4] and target.alias_target("products") == v1
        assert [d.doc_id for d in store.dead_letters.list(alias="products")] == ["a"], "unresolved letters stay"
        assert sorted(r.letter.doc_id for r in store.dead_letters.resolved()) == ["c", "z"]
        assert sorted(r.run_id for r in runs.list()) == ["r3", "r4"], "the newest result of each alias stays"
        assert [a.job_id for a in store.swap_log.attempts()] == [running], "a deleted job's swap attempts go with it"


def test_gc_forgets_the_transform_cache_of_aliases_that_are_gone(tmp_path: Path, store_url: tuple[str, str]) -> None:
    pipeline = pipeline_on(tmp_path, *store_url)
    with open_store(pipeline) as store, tantivy(pipeline) as target:
        cache_entries(store, "products", 3)  # the pipeline's alias, whose index does not exist
        cache_entries(store, "dropped", 4, age_days=40)  # gone from the pipeline a while ago
        cache_entries(store, "foreign", 2, age_days=40)
        cache_entries(store, "foreign", 1)  # still written to: another pipeline's, sharing the store
        cache_entries(store, "resumable", 2, age_days=40)
        running = job_in(store, [J.READY, J.RUNNING], 40, alias="resumable")

        preview = collect_garbage(pipeline, 30 * DAY, dry_run=True)
        assert sorted(store.transform_cache.aliases()) == ["dropped", "foreign", "products", "resumable"]
        report = collect_garbage(pipeline, 30 * DAY)
        for r in (preview, report):
            assert (r.transform_cache_deleted, r.transform_cache_aliases) == (7, ["dropped", "products"])
            kept = {(k.what, k.name): k.reason for k in r.kept if k.what == "transform cache"}
            assert kept == {
                ("transform cache", "foreign"): (
                    "not in this pipeline, but written within --older-than (another pipeline's?)"
                ),
                ("transform cache", "resumable"): f"job {running} may still use it",
            }
        assert {a: k.entries for a, k in store.transform_cache.aliases().items()} == {"foreign": 2, "resumable": 2}

        # once the alias has an index, its cache is at work, however old
        v1 = target.create_version("products", MAPPING)
        cache_entries(store, "products", 3, age_days=40)
        again = collect_garbage(pipeline, 30 * DAY)
        assert (again.transform_cache_deleted, again.transform_cache_aliases) == (0, [])
        assert store.transform_cache.aliases()["products"].entries == 3

        # and while its first reindex has not created its index yet, the job's outputs stay
        target.delete_version(v1)
        first = job_in(store, [J.READY], 0)
        last = collect_garbage(pipeline, 30 * DAY)
        assert (last.transform_cache_deleted, last.transform_cache_aliases) == (0, [])
        assert ("transform cache", "products", f"job {first} may still use it") in {
            (k.what, k.name, k.reason) for k in last.kept
        }


def test_a_failed_job_a_rerun_would_resume_is_kept(tmp_path: Path) -> None:
    pipeline = pipeline_on(tmp_path, f"sqlite:///{tmp_path / 'state.db'}", "")
    with open_store(pipeline) as store:
        failed = job_in(store, [J.FAILED], 3, {"products": "products_v1"})
        report = collect_garbage(pipeline, 1 * DAY)
        assert report.jobs_deleted == 0
        assert [(k.name, k.reason) for k in report.kept] == [(failed, "FAILED: a rerun would still resume it")]
        assert remaining_jobs(store) == {failed: (J.FAILED, 2)}


def test_gc_cli_json_and_bad_spans(tmp_path: Path, cli: Path) -> None:
    pipeline = pipeline_on(tmp_path, f"sqlite:///{tmp_path / 'state.db'}", "")
    with open_store(pipeline) as store:
        done = job_in(store, [J.READY, J.RUNNING, J.COMPLETED], 3)
        cache_entries(store, "dropped", 2, age_days=3)
    config = str(tmp_path / "pipeline.yaml")
    run = run_cli(cli, "gc", "-c", config, "--older-than", "2d", "--json")
    assert run.returncode == 0, run.stderr
    body = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert (body["jobs_deleted"], body["job_ids"], body["partitions_deleted"]) == (1, [done], 2)
    assert (body["transform_cache_deleted"], body["transform_cache_aliases"]) == (2, ["dropped"])
    assert "deleted 1 jobs (2 partitions)" in run.stderr
    assert "deleted 2 transform cache entries, of dropped" in run.stderr
    for bad in ("soon", "0d", "-3d"):
        run = run_cli(cli, "gc", "-c", config, "--older-than", bad)
        assert run.returncode == 2, (bad, run.stderr)
        assert "--older-than" in run.stderr
