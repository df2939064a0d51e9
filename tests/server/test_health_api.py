"""The health reads of a real `sparkindex serve`: the pipeline's preflight checks (`/api/check`),
the sync's gaps and how each ended (`/api/sync/gaps`), and each alias's last verify with its drift
(`/api/verify/aliases`); every state planted for real (see health_fixture)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from sparkindex.coordination.verify_runs import VerifyRun
from tests.e2e.shop import make_shop, wait_for
from tests.jobs.planting import index_without_spark
from tests.server import health_fixture as hf
from tests.server.conftest import ServerProcess
from tests.server.store_fixture import populate
from tests.server.test_ws import next_message


def _check(server: ServerProcess, **params: str) -> dict[str, Any]:
    body: dict[str, Any] = server.get("/api/check", params=params, timeout=120)
    return body


def test_a_failing_check_shows_with_its_fix_cached_until_refreshed(
    tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    pipeline = make_shop(tmp_path / "shop", products=30, partition_size=10)
    hf.break_a_table(pipeline)
    server = start_server(tmp_path / "shop" / "pipeline.yaml")

    first = _check(server)
    assert first["status"] == "FAIL" and first["ok"] is False and first["cached"] is False
    failing = {c["name"]: c for c in first["checks"] if c["status"] == "FAIL"}
    select = failing["source.select:reviews"]
    assert "table 'reviews' not found in the source" in select["detail"]
    assert "create the table" in select["fix"] and select["area"] == "source"
    assert first["counts"]["FAIL"] == len(failing) and first["counts"]["OK"] >= 5
    assert {c["name"] for c in first["checks"]} >= {"source.reachable", "store.writable", "target.disk", "spark.java"}
    assert first["ttl_s"] == 60 and first["seconds"] >= 0

    hf.mend_the_table(pipeline)
    again = _check(server)
    assert again["cached"] is True and again["checked_at"] == first["checked_at"], "a page refresh re-probes nothing"
    assert again["status"] == "FAIL" and again["age_s"] >= 0

    fresh = _check(server, refresh="1")
    assert fresh["cached"] is False and fresh["checked_at"] > first["checked_at"]
    assert fresh["status"] == "OK" and fresh["ok"] is True, [c for c in fresh["checks"] if c["status"] != "OK"]
    assert "source.select:reviews" in {c["name"] for c in fresh["checks"]}

    bad = server.http.get("/api/check", params={"refresh": "maybe"})
    assert bad.status_code == 400 and "'refresh'" in bad.json()["error"]
    assert "GET /api/check?refresh=1" in server.get("/api")["endpoints"]


def test_checks_never_show_a_password(tmp_path: Path, start_server: Callable[..., ServerProcess]) -> None:
    """A source that refuses the connection: the driver's error quotes the URL, the check hides it."""
    pipeline = make_shop(tmp_path / "shop", products=10, partition_size=10)
    config = pipeline.base_dir / "pipeline.yaml"
    config.write_text(
        config.read_text().replace(
            "url: sqlite:///shop.db", "url: postgresql://indexer:hunter2-secret@127.0.0.1:9/shop"
        )
    )
    server = start_server(config)
    response = server.http.get("/api/check", timeout=120)
    assert response.status_code == 200 and "hunter2" not in response.text
    reach = next(c for c in response.json()["checks"] if c["name"].startswith("source"))
    assert reach["status"] == "FAIL" and reach["fix"], reach
    assert "hunter2" not in server.log.read_text()


def test_last_verified_per_alias_with_its_drift(tmp_path: Path, start_server: Callable[..., ServerProcess]) -> None:
    pipeline = make_shop(tmp_path / "shop", products=60, partition_size=20)
    index = index_without_spark(pipeline, "products")
    server = start_server(tmp_path / "shop" / "pipeline.yaml")
    [never] = server.get("/api/verify/aliases")["aliases"]
    assert (never["alias"], never["status"], never["verified"]) == ("products", "never", False)
    assert never["finished_at"] is None

    planted = hf.drift_behind_the_index(pipeline)
    outcome = hf.verify_in_process(pipeline)
    assert not outcome.clean
    found: list[dict[str, Any]] = []

    def verified() -> bool:
        found[:] = server.get("/api/verify/aliases")["aliases"]
        return found[0]["verified"]

    wait_for(verified, 30, "the verify run to be listed", every=0.2)
    [row] = found
    assert row["status"] == "drift" and row["run_id"] == outcome.run_id and row["trigger"] == "cli"
    assert row["drift"] == {"missing": 1, "extra": 1, "stale": 1, "duplicates": 0, "unbuildable": 0}
    assert row["drift_total"] == 3 and row["checked"] == 60 and row["index_docs"] == 60
    assert {k: row["samples"][k] for k in planted} == {k: [v] for k, v in planted.items()}
    assert row["finished_at"] >= row["started_at"] and 0 <= row["age_s"] < 600
    assert row["in_pipeline"] is True and row["index"] == index and row["error"] is None

    # the socket pushes the same rows (a recorded verify run once made every send fail)
    with connect(server.ws_url, open_timeout=30) as ws:
        pushed = next_message(ws, lambda m: m.get("verified") and m["verified"][0]["verified"])
    assert pushed["verified"][0]["drift"] == row["drift"] and pushed["verify"]["runs"][0]["run_id"] == outcome.run_id


@pytest.mark.slow
def test_gaps_refused_then_reconciled_are_listed_per_group(
    tmp_path: Path, spark: Any, start_server: Callable[..., ServerProcess]
) -> None:
    pipeline = hf.polling_shop(tmp_path / "shop")
    hf.reindex(pipeline, spark)
    hf.changes_the_log_never_delivers(pipeline)
    server = start_server(tmp_path / "shop" / "pipeline.yaml")
    assert server.get("/api/sync/gaps") == {"groups": []}

    refused = hf.refused_gap(pipeline, spark, "audit")
    summary = hf.reconciled_gap(pipeline, spark, "audit")
    groups: list[dict[str, Any]] = []

    def listed() -> bool:
        groups[:] = server.get("/api/sync/gaps")["groups"]
        return bool(groups) and len(groups[0]["gaps"]) == 2

    wait_for(listed, 30, "both gaps to be listed", every=0.2)
    [audit] = groups
    assert audit["group"] == "audit" and audit["counts"] == {"reconciled": 1, "refused": 1}
    healed, first = audit["gaps"]  # newest first
    for gap in (healed, first):
        assert gap["alias"] == "products" and gap["stored"] is None
        assert "holds no offset" in gap["reason"] and "'audit'" in gap["reason"]
        assert gap["ended_at"] >= gap["found_at"] > 0
    assert first["outcome"] == "refused" and first["found"] is None
    assert "--on-gap reconcile" in first["detail"] and first["detail"] == str(refused)
    assert healed["outcome"] == "reconciled" and healed["found_at"] >= first["ended_at"]
    assert healed["found"] == summary.reconciled["products"] == {"missing": 1, "stale": 1, "extra": 1, "duplicates": 0}
    assert isinstance(healed["position"], int) and healed["position"] <= summary.position  # P, then the stream
    assert audit["events"]["gap"]["count"] == 2

    only = server.get("/api/sync/gaps", params={"group": "audit", "limit": 1})["groups"]
    assert [g["outcome"] for g in only[0]["gaps"]] == ["reconciled"]
    assert server.get("/api/sync/gaps", params={"group": "nobody"}) == {"groups": []}
    assert server.http.get("/api/sync/gaps", params={"limit": "0"}).status_code == 400


@pytest.mark.parametrize(
    "kind", [pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mysql", marks=pytest.mark.mysql)]
)
def test_gaps_and_verify_runs_on_server_stores(
    kind: str, tmp_path: Path, services: dict[str, str], start_server: Callable[..., ServerProcess]
) -> None:
    """Recorded through the store API the sync and verify use, read by the server's views on
    PostgreSQL and MariaDB (their DDL differs: key lengths, text columns)."""
    from sparkindex.coordination.engine import make_engine
    from sparkindex.coordination.sync_events import make_event_table, make_gap_table
    from sparkindex.coordination.tables import make_tables
    from sparkindex.coordination.verify_runs import verify_run_table

    prefix = f"t{uuid.uuid4().hex[:8]}_"
    populated = populate(tmp_path / "shop", services[kind], prefix)
    try:
        server = start_server(populated.config)
        assert server.get("/api/sync/gaps") == {"groups": []}
        events = populated.store.sync_events
        refused = events.gap_found("g1", "products", "slot 'x' does not exist", 1234, None)
        events.gap_ended(refused, "refused", detail="consumer group 'g1' cannot continue")
        healed = events.gap_found("g1", "products", "slot 'x' does not exist", 1234, 5678)
        events.gap_ended(
            healed, "reconciled", position=9999, found={"missing": 2, "stale": 5, "extra": 0, "duplicates": 0}
        )
        events.gap_found("g2", "products", "binlog purged", 77, 80)  # still open
        populated.store.verify_runs.record(
            [
                VerifyRun(
                    "run-1", "products", "products_v1", "cli", False, "drift",
                    checked=20, missing=1, extra=0, stale=2, duplicates=0, unbuildable=0, index_docs=19,
                    started_at=1.0, finished_at=2.0, report={"samples": {"missing": ["3"], "stale": ["4", "5"]}},
                )
            ]
        )  # fmt: skip
        groups: list[dict[str, Any]] = []

        def listed() -> bool:
            groups[:] = server.get("/api/sync/gaps")["groups"]
            return len(groups) == 2

        wait_for(listed, 30, "the gaps to be listed", every=0.2)
        g1, g2 = groups
        assert [(g["outcome"], g["position"], g["found"]) for g in g1["gaps"]] == [
            ("reconciled", 9999, {"missing": 2, "stale": 5, "extra": 0, "duplicates": 0}),
            ("refused", None, None),
        ]
        assert (g1["gaps"][0]["stored"], g1["gaps"][0]["available"]) == (1234, 5678)
        assert [(g["outcome"], g["ended_at"]) for g in g2["gaps"]] == [("open", None)]
        rows: list[dict[str, Any]] = []

        def verified() -> bool:
            rows[:] = server.get("/api/verify/aliases")["aliases"]
            return bool(rows[0]["verified"])

        wait_for(verified, 30, "the verify run to be listed", every=0.2)  # the views look for its table anew
        [row] = rows
        assert (row["status"], row["drift_total"], row["samples"]["stale"]) == ("drift", 3, ["4", "5"])
    finally:
        populated.close()
        engine = make_engine(services[kind])
        _, events_table = make_event_table(prefix)
        for table in (make_gap_table(prefix), events_table, verify_run_table(prefix)):
            table.drop(engine, checkfirst=True)
        make_tables(prefix).metadata.drop_all(engine)
        engine.dispose()
