"""/ws against a store changed by hand (no Spark): the live jobs, one job watched, and a job that
ends between two ticks reported once in its final state."""

from __future__ import annotations

import time
from typing import Any

import orjson
from websockets.sync.client import ClientConnection, connect

from sparkindex.coordination.states import JobStatus
from tests.server.conftest import ServerProcess
from tests.server.store_fixture import OWNER, Populated


def next_message(ws: ClientConnection, predicate: Any, timeout: float = 30) -> dict[str, Any]:
    """The first message (in order of arrival) that satisfies *predicate*."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no matching message within {timeout}s")
        message: dict[str, Any] = orjson.loads(ws.recv(timeout=left))
        if predicate(message):
            return message


def test_live_jobs_watch_and_final_state(server: ServerProcess, populated: Populated) -> None:
    with connect(server.ws_url, open_timeout=30) as ws:
        first = orjson.loads(ws.recv(timeout=30))
        assert first["type"] == "progress"
        assert [j["jobId"] for j in first["jobs"]] == [populated.running_job], "only live jobs are pushed"
        live = first["jobs"][0]
        assert live["status"] == "RUNNING" and live["deadLetters"] == 3
        assert live["stats"]["jobStats"]["partitions"] == {"COMPLETED": 1, "PENDING": 2, "PROCESSING": 1}
        assert first["sync"] == [] and first["verify"]["runs"] == [] and "watch" not in first

        ws.send("not json")
        ws.send(orjson.dumps({"watch": 42}).decode())  # not a job id: ignored, the socket stays
        ws.send(orjson.dumps({"watch": populated.running_job}).decode())
        watched = next_message(ws, lambda m: "watch" in m)["watch"]
        assert watched["job"]["jobId"] == populated.running_job and watched["partitionsTotal"] == 4
        by_index = {p["index"]: p for p in watched["partitions"]}
        assert by_index[0]["owner"] == OWNER and by_index[0]["cursor"] == [5]
        assert sorted(d["doc_id"] for d in watched["deadLetters"]) == ["3", "4", "7"]
        assert watched["history"]["source"] in ("observed", "reconstructed from partition times")

        # The job ends between two ticks: the next messages carry it once, COMPLETED.
        store = populated.store
        for index in (0, 2, 3):
            pid = populated.partitions[index]
            current = store.partition_rows.partition(pid)
            claim = current if current.status == "PROCESSING" else store.partition_rows.claim(pid, OWNER, "run-2", 60)
            assert claim is not None
            store.partition_rows.complete(pid, claim.claim_token, (index * 10 + 10,), success=10)
        store.job_rows.transition_job(populated.running_job, JobStatus.COMPLETED)
        ended = next_message(ws, lambda m: any(j["status"] == "COMPLETED" for j in m["jobs"]))
        done = ended["jobs"][0]
        assert (
            done["stats"]["jobStats"]["partitions"] == {"COMPLETED": 4} and done["stats"]["jobStats"]["etaSeconds"] == 0
        )
        assert ended["watch"]["job"]["status"] == "COMPLETED", "the watched view follows"
        later = next_message(ws, lambda m: m["time"] > ended["time"])
        assert later["jobs"] == [], "a finished job is reported once, then leaves the live list"
        assert later["watch"]["job"]["status"] == "COMPLETED", "a watched job stays watched after it ends"
