"""A real `sparkindex serve` process on a free port, against a real coordination store."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.shop import wait_for
from tests.server.store_fixture import Populated, populate

TOKEN = "test-token-4f1c9a"


class ServerProcess:
    """`sparkindex serve --port 0` as a subprocess; its URL read from the line it prints."""

    def __init__(self, cli: Path, config: Path, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.log = log_dir / "serve.err"
        self.out = log_dir / "serve.out"
        full_env = {**os.environ, "SPARKINDEX_TOKEN": TOKEN, **(env or {})}
        if env is not None and env.get("SPARKINDEX_TOKEN") == "":
            del full_env["SPARKINDEX_TOKEN"]
        with self.log.open("wb") as err, self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(cli), "serve", "-c", str(config), "--port", "0"], stdout=out, stderr=err, env=full_env
            )
        self.url = ""
        wait_for(self._started, 60, "the server to print its address", every=0.05)
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def _started(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"serve exited {self.proc.returncode}: {self.log.read_text()}")
        m = re.search(r"listening on (http://\S+?)/?\s", self.log.read_text())
        if m:
            self.url = m.group(1)
        return bool(m)

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def auth(self, token: str = TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def get(self, path: str, **kw: Any) -> Any:
        r = self.http.get(path, **kw)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def wait_action(self, action_id: str, timeout: float) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def done() -> bool:
            found.update(self.get(f"/api/actions/{action_id}"))
            return found["state"] == "finished"

        wait_for(done, timeout, f"action {action_id} to finish", every=0.5)
        return found

    def stop(self) -> None:
        """End the server, and the commands it started that still run (this test started them)."""
        pids: list[int] = []
        if self.proc.poll() is None:
            try:
                pids = [a["pid"] for a in self.get("/api/actions")["actions"] if a["state"] == "running"]
            except (httpx.HTTPError, AssertionError):
                pids = []
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # each command runs in its own session (group = its pid)
        self.http.close()


@pytest.fixture
def start_server(cli: Path, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    servers: list[ServerProcess] = []

    def start(config: Path, env: dict[str, str] | None = None) -> ServerProcess:
        log_dir = tmp_path / f"server{len(servers)}"
        log_dir.mkdir()
        server = ServerProcess(cli, config, log_dir, env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def populated(tmp_path: Path) -> Iterator[Populated]:
    """A store with a finished job and a running one (see store_fixture), closed after the test."""
    state = populate(tmp_path / "shop")
    yield state
    state.close()


@pytest.fixture
def server(populated: Populated, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server over the populated store."""
    return start_server(populated.config)
