"""Who may change what: the token refused and accepted, request validation, foreign hosts and
origins, the command line's own checks (a taken port, a generated token)."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from sparkindex.coordination.states import JobStatus
from tests.server.conftest import TOKEN, ServerProcess
from tests.server.store_fixture import Populated


def test_stop_needs_the_token_and_then_stops_the_job(server: ServerProcess, populated: Populated) -> None:
    path = f"/api/jobs/{populated.running_job}/stop"
    missing = server.http.post(path)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert "needs the server's token" in missing.json()["error"]
    wrong = server.http.post(path, headers=server.auth("not-the-token"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "wrong token"
    not_bearer = server.http.post(path, headers={"Authorization": f"Basic {TOKEN}"})
    assert not_bearer.status_code == 401
    job = populated.store.job_rows.job(populated.running_job)
    assert job.status == JobStatus.RUNNING, "refused requests change nothing"

    ok = server.http.post(path, headers=server.auth())
    assert ok.status_code == 200, ok.text
    assert ok.json()["job"]["status"] == "STOPPING"
    assert populated.store.job_rows.job(populated.running_job).status == JobStatus.STOPPING

    again = server.http.post(path, headers=server.auth())
    assert again.status_code == 409 and "only a READY or RUNNING job can be stopped" in again.json()["error"]
    unknown = server.http.post("/api/jobs/nope/stop", headers=server.auth())
    assert unknown.status_code == 404


def test_every_state_change_needs_the_token(server: ServerProcess) -> None:
    for path in ("/api/reindex", "/api/verify", "/api/dead-letters/redrive", "/api/jobs/x/stop"):
        r = server.http.post(path, json={})
        assert r.status_code == 401, (path, r.text)
    assert server.get("/api/actions") == {"actions": []}, "nothing was started"


def test_requests_are_validated_before_anything_starts(server: ServerProcess) -> None:
    cases = [
        ("/api/reindex", b'{"index": ["orders"]}', "'orders' not in this pipeline (aliases: products)"),
        ("/api/reindex", b'{"index": "products"}', "field 'index' must be list, got str"),
        ("/api/reindex", b'{"new": "yes"}', "field 'new' must be bool"),
        ("/api/reindex", b'{"force": true}', "unknown field(s) 'force'"),
        ("/api/reindex", b"{not json", "not valid JSON"),
        ("/api/reindex", b"[1]", "expected a JSON object, got list"),
        ("/api/verify", b'{"index": [1]}', "must be a list of alias names"),
        ("/api/dead-letters/redrive", b'{"alias": "orders"}', "'orders' not in this pipeline"),
        ("/api/dead-letters/redrive", b'{"error_class": 3}', "field 'error_class' must be str"),
    ]
    for path, body, message in cases:
        r = server.http.post(path, content=body, headers=server.auth())
        assert r.status_code == 400, (path, body, r.text)
        assert message in r.json()["error"], (path, body, r.json())
    assert server.get("/api/actions") == {"actions": []}


def test_a_reindex_of_an_alias_a_live_driver_holds_is_refused(server: ServerProcess, populated: Populated) -> None:
    populated.store.locks.acquire("products", "driver-elsewhere/123", 120, job_id=populated.running_job)
    r = server.http.post("/api/reindex", json={"index": ["products"]}, headers=server.auth())
    assert r.status_code == 409, r.text
    assert "driver-elsewhere/123" in r.json()["error"] and populated.running_job in r.json()["error"]
    assert server.get("/api/actions") == {"actions": []}


def test_a_command_started_here_reports_its_exit_code_and_json(server: ServerProcess, populated: Populated) -> None:
    """A re-drive runs `sparkindex dlq redrive ... --json` as a subprocess; the action records the
    command, its exit code and its JSON. A value that looks like options stays one value."""
    r = server.http.post("/api/dead-letters/redrive", json={"error_class": "-x --json"}, headers=server.auth())
    assert r.status_code == 202, r.text
    action = r.json()["action"]
    assert r.headers["location"] == f"/api/actions/{action['id']}"
    assert action["command"] == f"sparkindex dlq redrive -c {populated.config} --error-class=-x --json --json"
    done = server.wait_action(action["id"], 300)
    assert done["exit_code"] == 0 and done["outcome"] == "done", done["stderr_tail"]
    # the value reached the command whole, as a value: no letter of that class, nothing tried
    assert done["result"]["error_class"] == "-x --json" and done["result"]["attempted"] == 0


def test_foreign_hosts_and_origins_are_refused(server: ServerProcess) -> None:
    r = server.http.get("/api/jobs", headers={"Host": "attacker.example:8484"})
    assert r.status_code == 421 and "attacker.example" in r.json()["error"]
    assert server.http.get("/api/jobs", headers={"Host": "localhost"}).status_code == 200
    with pytest.raises(InvalidStatus), connect(server.ws_url, origin="http://attacker.example", open_timeout=10):  # type: ignore[arg-type]
        pass
    with connect(server.ws_url, origin=server.url, open_timeout=10) as ws:  # type: ignore[arg-type]
        assert orjson.loads(ws.recv(timeout=30))["type"] == "progress"


def test_a_generated_token_is_printed_and_works(
    populated: Populated, start_server: Callable[..., ServerProcess]
) -> None:
    server = start_server(populated.config, env={"SPARKINDEX_TOKEN": ""})
    m = re.search(r"token \(for stop, re-drive, verify, reindex\): (\S+)", server.log.read_text())
    assert m, server.log.read_text()
    generated = m.group(1)
    assert generated != TOKEN and len(generated) >= 24
    assert server.http.post("/api/jobs/nope/stop", headers=server.auth(TOKEN)).status_code == 401
    assert server.http.post("/api/jobs/nope/stop", headers=server.auth(generated)).status_code == 404


def test_a_taken_port_is_a_clear_usage_error(populated: Populated, cli: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = subprocess.run(
            [str(cli), "serve", "-c", str(populated.config), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2, r.stderr
    assert f"127.0.0.1:{port} is in use; choose another with --port" in r.stderr


def test_a_bad_config_is_a_clear_usage_error(tmp_path: Path, cli: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: {url: sqlite:///x.db}\nindexes: []\n")
    r = subprocess.run([str(cli), "serve", "-c", str(bad), "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "indexes" in r.stderr, r.stderr


def test_reads_from_this_machine_need_no_token(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/api/jobs", timeout=10).status_code == 200
    assert httpx.get(server.url + "/metrics", timeout=10).status_code == 200


def test_serve_listens_on_localhost_8484_by_default(cli: Path) -> None:
    r = subprocess.run([str(cli), "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert "127.0.0.1" in r.stdout and "8484" in r.stdout and "SPARKINDEX_TOKEN" in r.stdout
