"""The REST API of a real `sparkindex serve` against a real store in a known state."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkindex.coordination.states import JobStatus
from tests.e2e.shop import wait_for
from tests.server.conftest import ServerProcess
from tests.server.store_fixture import ERROR, OWNER, Populated, populate


def test_jobs_list_newest_first_with_totals(server: ServerProcess, populated: Populated) -> None:
    jobs = server.get("/api/jobs")["jobs"]
    assert [j["id"] for j in jobs] == [populated.running_job, populated.done_job]
    running, done = jobs
    assert running["status"] == "RUNNING" and done["status"] == "COMPLETED"
    assert running["processed"] == 5 + 10 and running["success"] == 4 + 10 and running["failed"] == 1
    assert running["partitions"] == {"PROCESSING": 1, "COMPLETED": 1, "PENDING": 2}
    assert done["processed"] == 20 and done["total"] == 20 and done["indexes"] == {"products": "products_v1"}
    assert done["seconds"] is not None and done["seconds"] >= 0
    only_done = server.get("/api/jobs", params={"status": "COMPLETED"})["jobs"]
    assert [j["id"] for j in only_done] == [populated.done_job]
    assert server.get("/api/jobs", params={"limit": 1})["jobs"][0]["id"] == populated.running_job


def test_one_job_progress_errors_and_timings(server: ServerProcess, populated: Populated) -> None:
    body = server.get(f"/api/jobs/{populated.running_job}")
    assert body["job"]["status"] == "RUNNING" and body["job"]["aliases"] == ["products"]
    progress = body["progress"]
    assert progress["status"] == "RUNNING"  # OpenMetadata's reindex progress shape, extended
    job_stats, entity = progress["stats"]["jobStats"], progress["stats"]["entityStats"]["products"]
    assert job_stats["totalRecords"] == 40 and job_stats["successRecords"] == 14 and job_stats["failedRecords"] == 1
    assert entity["processedRecords"] == 15 and entity["partitions"] == {"COMPLETED": 1, "PENDING": 2, "PROCESSING": 1}
    assert progress["deadLetters"] == 3
    assert body["timings"]["partition_seconds"]["count"] == 1
    errors = body["errors"]
    assert errors["partitions_with_errors"] == 1
    assert errors["partitions"][0]["last_error"] == ERROR and errors["partitions"][0]["retries"] == 1
    assert {(d["error_class"], d["count"]) for d in errors["dead_letters"]} == {
        ("MapperParsingError", 2),
        ("DocumentError", 1),
    }
    finished = server.get(f"/api/jobs/{populated.done_job}")["progress"]
    assert finished["status"] == "COMPLETED" and finished["stats"]["jobStats"]["etaSeconds"] == 0.0


def test_partitions_with_owner_cursor_retries_and_last_error(server: ServerProcess, populated: Populated) -> None:
    parts = {p["index"]: p for p in server.get(f"/api/jobs/{populated.running_job}/partitions")["partitions"]}
    assert sorted(parts) == [0, 1, 2, 3]
    assert parts[0]["status"] == "PROCESSING" and parts[0]["owner"] == OWNER and parts[0]["cursor"] == [5]
    assert parts[0]["processed"] == 5 and parts[0]["failed"] == 1 and parts[0]["claims"] == 1
    assert parts[1]["status"] == "COMPLETED" and parts[1]["completed_at"] >= parts[1]["started_at"]
    assert parts[2]["status"] == "PENDING" and parts[2]["retries"] == 1 and parts[2]["last_error"] == ERROR
    assert parts[2]["owner"] is None
    assert parts[3]["claims"] == 0 and parts[3]["range_start"] == [31] and parts[3]["range_end"] == [41]
    pending = server.get(f"/api/jobs/{populated.running_job}/partitions", params={"status": "PENDING"})["partitions"]
    assert sorted(p["index"] for p in pending) == [2, 3]


def test_dead_letters_filter_by_alias_and_error_class(server: ServerProcess, populated: Populated) -> None:
    every = server.get("/api/dead-letters")["dead_letters"]
    assert sorted(d["doc_id"] for d in every) == ["3", "4", "7"]
    mapper = server.get("/api/dead-letters", params={"alias": "products", "error_class": "MapperParsingError"})
    assert sorted(d["doc_id"] for d in mapper["dead_letters"]) == ["3", "4"]
    assert all(d["attempts"] == 1 and d["job_id"] == populated.running_job for d in mapper["dead_letters"])
    assert server.get("/api/dead-letters", params={"error_class": "Nope"})["dead_letters"] == []
    summary = server.get("/api/dead-letters/summary", params={"job_id": populated.running_job})["classes"]
    assert {(c["error_class"], c["count"]) for c in summary} == {("MapperParsingError", 2), ("DocumentError", 1)}


def test_bad_requests_get_clear_errors(server: ServerProcess, populated: Populated) -> None:
    cases = [
        ("/api/jobs/no-such-job", {}, 404, "no-such-job"),
        ("/api/jobs/no-such-job/partitions", {}, 404, "not found"),
        ("/api/jobs", {"limit": "many"}, 400, "'limit': expected an integer, got 'many'"),
        ("/api/jobs", {"limit": "0"}, 400, "between 1 and 1000"),
        ("/api/jobs", {"status": "DONE"}, 400, "'DONE' is not one of"),
        (f"/api/jobs/{populated.running_job}/partitions", {"status": "x"}, 400, "'status'"),
        ("/api/dead-letters", {"alias": "orders"}, 400, "'orders' is not an alias of this pipeline (products)"),
        ("/api/actions/42", {}, 404, "action '42' not found"),
    ]
    for path, params, status, message in cases:
        r = server.http.get(path, params=params)
        assert r.status_code == status, (path, r.text)
        assert message in r.json()["error"], (path, r.json())


def test_sync_consumers_appear_when_a_sync_saves_offsets(server: ServerProcess, populated: Populated) -> None:
    assert server.get("/api/sync") == {"consumers": []}
    # what `sparkindex sync` writes (the change-capture engine's own offset store)
    offsets = populated.store.offsets
    offsets.save(
        "shop-sync",
        {"products": (123456, {"lsn": "0/1E240"}, "products_v2")},
        {"products": (10, 2)},
        lag_s=3.5,
        retained_bytes=7_340_032,
    )
    found: list[dict[str, Any]] = []

    def listed() -> bool:
        found[:] = server.get("/api/sync")["consumers"]
        return bool(found)

    wait_for(listed, 30, "the consumer group to be listed", every=0.2)
    assert found == [
        {
            "group": "shop-sync",
            "alias": "products",
            "position": "123456",
            "updated_at": pytest.approx(time.time(), abs=60),
            "lag_s": 3.5,
            "index": "products_v2",
            "applied": 10,
            "deleted": 2,
            "retained_bytes": 7_340_032,
        }
    ]
    families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
    labels = {"group": "shop-sync", "alias": "products"}
    for name, value in (
        ("sparkindex_sync_lag_seconds", 3.5),
        ("sparkindex_sync_documents_applied", 10),
        ("sparkindex_sync_documents_deleted", 2),
        ("sparkindex_sync_retained_bytes", 7_340_032),
    ):
        samples = [s for s in families[name].samples if s.labels == labels]
        assert [s.value for s in samples] == [value], name
    age = families["sparkindex_sync_offset_age_seconds"].samples[0]
    assert age.labels == labels and 0 <= age.value < 60


def test_sync_errors_and_gaps_are_counted_in_metrics(server: ServerProcess, populated: Populated) -> None:
    """Errors of a sync's log reader (a process Spark owns) reach /metrics through the store."""
    events = populated.store.sync_events
    for _ in range(3):
        events.record("shop-sync", "source", "connection refused")
    events.record("shop-sync", "gap", "products: slot gone")
    counts: dict[str, float] = {}

    def counted() -> bool:
        families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
        family = families.get("sparkindex_sync_errors")
        counts.clear()
        for s in family.samples if family else []:
            if s.name.endswith("_total") and s.labels.get("group") == "shop-sync":
                counts[s.labels["kind"]] = s.value
        return bool(counts)

    wait_for(counted, 30, "the sync errors to be exported", every=0.2)
    assert counts == {"source": 3, "gap": 1}


def test_page_and_assets_are_served_with_a_strict_policy(server: ServerProcess) -> None:
    page = server.http.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<script src="/static/app.js"' in page.text and "http" not in page.text.split("<body>")[0].replace(
        'name="viewport"', ""
    ), "the page loads nothing from elsewhere"
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    for asset, kind in (("/static/app.js", "javascript"), ("/static/app.css", "css")):
        r = server.http.get(asset)
        assert r.status_code == 200 and kind in r.headers["content-type"], asset
    assert server.http.get("/static/nothing.js").status_code == 404
    assert "GET /api/jobs/{id}" in " ".join(server.get("/api")["endpoints"])


def test_the_pipeline_is_shown_without_secrets(
    tmp_path: Path, populated: Populated, start_server: Callable[..., ServerProcess]
) -> None:
    text = populated.config.read_text().replace(
        "url: sqlite:///shop.db", "url: postgresql://indexer:hunter2-secret@127.0.0.1:9/shop"
    )
    config = populated.config.with_name("secret.yaml")
    config.write_text(text)
    server = start_server(config)
    described = server.get("/api/pipeline")
    assert described["source"] == "postgresql://indexer:***@127.0.0.1:9/shop"
    assert described["aliases"] == ["products"]
    for path in ("/", "/api/pipeline", "/api/jobs", "/metrics"):
        assert "hunter2" not in server.http.get(path).text
    assert "hunter2" not in server.log.read_text()


def test_running_job_status_is_still_running_in_the_store(populated: Populated) -> None:
    """Guard for the fixture itself: the API tests read a job that really is RUNNING."""
    assert populated.store.job_rows.job(populated.running_job).status == JobStatus.RUNNING


@pytest.mark.parametrize(
    "kind", [pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mysql", marks=pytest.mark.mysql)]
)
def test_reads_and_metrics_on_server_stores(
    kind: str, tmp_path: Path, services: dict[str, str], start_server: Callable[..., ServerProcess]
) -> None:
    """The same views over PostgreSQL and MariaDB (their SQL differs: CASE sums, reflection)."""
    import uuid

    from sparkindex.coordination.engine import make_engine
    from sparkindex.coordination.tables import make_tables

    prefix = f"t{uuid.uuid4().hex[:8]}_"
    populated = populate(tmp_path / "shop", services[kind], prefix)
    try:
        server = start_server(populated.config)
        jobs = server.get("/api/jobs")["jobs"]
        assert [(j["id"], j["processed"]) for j in jobs] == [(populated.running_job, 15), (populated.done_job, 20)]
        parts = server.get(f"/api/jobs/{populated.running_job}/partitions")["partitions"]
        assert [(p["index"], p["status"], p["owner"]) for p in parts][:2] == [
            (0, "PROCESSING", OWNER),
            (1, "COMPLETED", OWNER),
        ]
        assert len(server.get("/api/dead-letters", params={"error_class": "MapperParsingError"})["dead_letters"]) == 2
        families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
        assert [s.value for s in families["sparkindex_coordination_up"].samples] == [1.0]
        completed = [s for s in families["sparkindex_partitions"].samples if s.labels["status"] == "COMPLETED"]
        assert completed[0].value == 3
        buckets = {s.labels.get("le"): s.value for s in families["sparkindex_partition_duration_seconds"].samples}
        assert buckets["+Inf"] == 3
        offset = make_tables(prefix).sync_offset  # made with the rest of the store's schema
        with populated.store.engine.begin() as conn:
            conn.execute(
                offset.insert().values(
                    group_name="g",
                    alias="products",
                    position=7,
                    offset_json="{}",
                    applied=0,
                    deleted=0,
                    lag_s=1.0,
                    updated_at=time.time(),
                )
            )
        wait_for(lambda: bool(server.get("/api/sync")["consumers"]), 30, "the consumer group", every=0.2)
        assert server.get("/api/sync")["consumers"][0]["position"] == "7"
    finally:
        populated.close()
        engine = make_engine(services[kind])
        make_tables(prefix).metadata.drop_all(engine)
        engine.dispose()
