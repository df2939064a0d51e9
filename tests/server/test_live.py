"""A real reindex of the sample shop on Spark, started through the API and watched over /ws,
then read back through /metrics (parsed by prometheus_client) and the REST views."""

from __future__ import annotations

import itertools
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from sparkindex.resources import open_store
from tests.e2e.shop import make_shop, wait_for
from tests.server.conftest import ServerProcess
from tests.server.source_gate import ENDED, SourceGate, in_store

pytestmark = pytest.mark.slow
PRODUCTS = 8_000
PARTITIONS = 16


def metrics(server: ServerProcess) -> dict[str, Any]:
    """family name -> {labels as a sorted tuple: value}; also checks the text parses."""
    text = server.http.get("/metrics").text
    found: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        found[family.name] = {
            tuple(sorted(s.labels.items())): s.value for s in family.samples if s.name != family.name + "_created"
        }
        found[family.name + ":type"] = family.type
        found[family.name + ":samples"] = family.samples
    return found


def test_websocket_streams_a_real_reindex_to_completed(
    tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    pipeline = make_shop(
        tmp_path / "shop", PRODUCTS, PRODUCTS // PARTITIONS, batch_size=250, page_size=250, sync_every_s=0.5
    )
    server = start_server(tmp_path / "shop" / "pipeline.yaml")
    before = metrics(server)
    assert before["sparkindex_coordination_up"] == {(): 1.0}
    assert before["sparkindex_jobs"][(("status", "RUNNING"),)] == 0

    messages: list[dict[str, Any]] = []
    received_at: list[float] = []
    # The run must be seen part-way by at least one 2 s push; on a fast machine the driver's head
    # start can index all 8,000 rows within one. So the source is held once, as soon as the store
    # shows a partition completed and some still pending, and let go at the first push that shows
    # the job part-way (such a push must come: the pending partitions cannot complete while held).
    gate = SourceGate(tmp_path / "shop" / "shop.db")
    store = open_store(pipeline)  # closed in the finally below, with the gate
    held_at: tuple[int, dict[str, int]] | None = None  # the store when the gate was taken
    try:
        with connect(server.ws_url, open_timeout=30) as ws:
            first = orjson.loads(ws.recv(timeout=30))
            assert first["type"] == "progress" and first["jobs"] == [] and first["sync"] == []
            started = server.http.post("/api/reindex", json={"index": ["products"]}, headers=server.auth())
            assert started.status_code == 202, started.text
            action_id = started.json()["action"]["id"]
            pushes_held = pushes_after_action = 0
            deadline = time.monotonic() + 600
            while True:
                assert time.monotonic() < deadline, "the job did not end within 600 s"
                if held_at is None:
                    states = in_store(store)[2]
                    if states.get("COMPLETED") and states.get("PENDING"):
                        gate.hold()
                        held_at = in_store(store)[1:]
                try:  # while the gate waits, the store is looked at every 20 ms between pushes
                    raw = ws.recv(timeout=60 if held_at is not None else 0.02)
                except TimeoutError:
                    if held_at is not None:
                        raise
                    continue
                m = orjson.loads(raw)
                messages.append(m)
                received_at.append(time.monotonic())
                if gate.held:
                    if any(
                        j["status"] == "RUNNING"
                        and 0 < j["stats"]["jobStats"]["processedRecords"] < PRODUCTS
                        and 0 < j["stats"]["jobStats"]["partitions"].get("COMPLETED", 0) < PARTITIONS
                        for j in m["jobs"]
                    ):
                        gate.release()
                    else:
                        pushes_held += 1  # the first push after the hold shows it part-way
                        assert pushes_held <= 5, f"held part-way at {held_at}, the pushes did not show it: {m}"
                if any(j["status"] in ENDED for j in m["jobs"]):
                    break
                if action_id not in {a["id"] for a in m["actions"]}:  # not started yet, or ended
                    action = server.get(f"/api/actions/{action_id}")
                    if action["state"] == "finished":
                        assert action["exit_code"] == 0, f"the reindex ended, its job unfinished: {action}"
                        pushes_after_action += 1  # its job's final state is on the next push
                        assert pushes_after_action <= 5, f"the reindex ended, its job not pushed as ended: {m}"
    finally:
        gate.close()
        store.close()

    jobs = [j for m in messages for j in m["jobs"]]
    assert jobs, "the running job was pushed"
    job_id = jobs[-1]["jobId"]
    assert {j["jobId"] for j in jobs} == {job_id}
    final = jobs[-1]
    assert final["status"] == "COMPLETED", final
    # OpenMetadata's reindex progress shape, with processed, docs/s, ETA and partitions by state added
    assert set(final["stats"]) == {"jobStats", "entityStats"}
    total = final["stats"]["jobStats"]
    assert total["totalRecords"] == total["successRecords"] == total["processedRecords"] == PRODUCTS
    assert total["failedRecords"] == 0 and total["partitions"] == {"COMPLETED": PARTITIONS}
    assert final["stats"]["entityStats"]["products"]["successRecords"] == PRODUCTS

    running = [j["stats"]["jobStats"] for j in jobs if j["status"] == "RUNNING"]
    processed = [s["processedRecords"] for s in running]
    assert processed == sorted(processed), "progress never goes backwards"
    assert any(0 < p < PRODUCTS for p in processed), f"no progress seen between start and end: {processed}, {held_at}"
    moving = [s for s in running if 0 < s["processedRecords"] < PRODUCTS]
    assert any(s["docsPerSecond"] and s["docsPerSecond"] > 0 for s in moving), moving
    assert any(s["etaSeconds"] is not None and s["etaSeconds"] > 0 for s in moving), moving
    # partitions by state while running, consistent with the counts: every partition in some
    # state, a completed one holds its 500 documents, and the job is seen part-way (PROCESSING
    # itself is a moment a 2 s push may miss: a 500-row partition is claimed and completed in it)
    per_partition = PRODUCTS // PARTITIONS
    assert all(sum(s["partitions"].values()) == PARTITIONS for s in moving), moving
    assert all(s["partitions"].get("COMPLETED", 0) * per_partition <= s["processedRecords"] for s in moving), moving
    assert any(0 < s["partitions"].get("COMPLETED", 0) < PARTITIONS for s in moving), moving
    gaps = [b - a for a, b in itertools.pairwise(received_at[1:])]  # the first came at once
    assert 1.0 <= statistics.median(gaps) <= 4.0, f"pushed every 2 s: {gaps}"

    action = server.wait_action(action_id, 120)
    assert action["exit_code"] == 0 and action["outcome"] == "done", action["stderr_tail"]
    assert action["result"]["status"] == "COMPLETED" and action["result"]["job_id"] == job_id
    assert action["result"]["indexed"] == PRODUCTS

    # the REST views and the metrics agree with the store
    with open_store(pipeline) as store:
        assert store.job_rows.job(job_id).status == "COMPLETED"
    detail = server.get(f"/api/jobs/{job_id}")
    assert detail["timings"]["partition_seconds"]["count"] == PARTITIONS
    after = metrics(server)
    assert after["sparkindex_documents_indexed"] == {(("entity", "products"),): float(PRODUCTS)}
    assert after["sparkindex_documents_indexed:type"] == "counter"
    assert after["sparkindex_documents_failed"] == {(("entity", "products"),): 0.0}
    assert after["sparkindex_jobs"][(("status", "COMPLETED"),)] == 1
    assert after["sparkindex_partitions"][(("status", "COMPLETED"),)] == PARTITIONS
    assert after["sparkindex_partitions_planned"] == {(): float(PARTITIONS)}
    assert after["sparkindex_partitions_completed"] == {(): float(PARTITIONS)}
    assert after["sparkindex_partitions_acquired"][()] >= PARTITIONS  # claims (retries would add)
    assert after["sparkindex_partitions_held"] == {(): 0.0}
    assert after["sparkindex_partitions_closed"] == {(): 0.0}
    durations = {s.labels.get("le"): s.value for s in after["sparkindex_partition_duration_seconds:samples"]}
    assert durations["+Inf"] == PARTITIONS and after["sparkindex_partition_duration_seconds:type"] == "histogram"
    # bulk latency, timed by the workers and carried through the store: at least one bulk per
    # partition (PRODUCTS / 250-document batches), cumulative buckets, a positive sum
    bulk = {s.labels.get("le"): s.value for s in after["sparkindex_bulk_latency_seconds:samples"] if "le" in s.labels}
    counts = [bulk[le] for le in sorted((k for k in bulk if k != "+Inf"), key=float)] + [bulk["+Inf"]]
    assert counts == sorted(counts) and bulk["+Inf"] >= PRODUCTS // 250
    bulk_sum = [s.value for s in after["sparkindex_bulk_latency_seconds:samples"] if s.name.endswith("_sum")]
    assert bulk_sum and bulk_sum[0] > 0
    # Data Prepper's partition error counters (a clean run has none; tests/coordination plants both)
    assert after["sparkindex_partition_not_found_errors"] == {(): 0.0}
    assert after["sparkindex_partition_update_errors"] == {(): 0.0}

    # Verify through the API: `sparkindex verify --json` on Spark as a subprocess, recorded in
    # the store, then shown by /api/verify and /metrics.
    started = server.http.post("/api/verify", json={"index": ["products"]}, headers=server.auth())
    assert started.status_code == 202, started.text
    again = server.http.post("/api/verify", json={}, headers=server.auth())
    assert again.status_code == 409 and "already running" in again.json()["error"]
    verified = server.wait_action(started.json()["action"]["id"], 300)
    assert verified["exit_code"] == 0, verified["stderr_tail"]
    result = verified["result"]
    assert (result["missing"], result["extra"], result["stale"], result["duplicates"]) == (0, 0, 0, 0)
    assert result["checked"] == result["index_docs"] == PRODUCTS
    # the verify-run table is created by the first verify; the views look for a table that was
    # absent at most every 2 s, so the first record may show a moment after the run ended
    wait_for(lambda: bool(server.get("/api/verify")["runs"]), 30, "the verify run in /api/verify")
    runs = server.get("/api/verify")["runs"]
    assert [(r["alias"], r["status"], r["checked"]) for r in runs] == [("products", "clean", PRODUCTS)]
    drift = metrics(server)["sparkindex_verify_drift"]
    assert {dict(k)["kind"]: v for k, v in drift.items()} == {"missing": 0, "extra": 0, "stale": 0, "duplicates": 0}


def test_a_scheduled_verify_runs_when_due(
    tmp_path: Path, start_server: Callable[..., ServerProcess], cli: Path
) -> None:
    """`verify: {every: 1h}`: a server whose pipeline never had a scheduled check runs one at once
    (as a subprocess), records it as scheduled, and shows it."""
    make_shop(tmp_path / "shop", 2_000, 500)
    config = tmp_path / "shop" / "pipeline.yaml"
    built = subprocess.run(
        [str(cli), "reindex", "-c", str(config), "--json"], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr
    config.write_text(config.read_text() + "verify:\n  every: 1h\n")
    server = start_server(config)
    found: dict[str, Any] = {}

    def scheduled_done() -> bool:
        actions = server.get("/api/actions")["actions"]
        found.update(next((a for a in actions if a.get("trigger") == "scheduled" and a["state"] == "finished"), {}))
        return bool(found)

    wait_for(scheduled_done, 300, "the scheduled verify to run and finish", every=0.5)
    assert found["exit_code"] == 0 and found["result"]["missing"] == 0, found["stderr_tail"]
    assert "sparkindex.server.scheduled_verify" in found["command"]
    runs = server.get("/api/verify")["runs"]
    assert [(r["alias"], r["trigger"], r["status"]) for r in runs] == [("products", "scheduled", "clean")]
    assert server.get("/api/verify")["every_s"] == 3600
