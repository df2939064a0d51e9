"""Headless Chromium (Debian's /usr/bin/chromium) driven over the Chrome DevTools Protocol.

The lightest driver that works here: the browser's own debugging WebSocket and the `websockets`
client the project already has; no browser download, no Node.js. Messages are pumped by one
reader: command replies are matched by id, events are kept for whoever waits for them.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.sync.client import ClientConnection, connect

from tests.e2e.shop import wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1100",
]


class CDPError(AssertionError):
    pass


class Chromium:
    def __init__(self, workdir: Path) -> None:
        profile = workdir / "chromium-profile"
        profile.mkdir(parents=True)
        self.log = (workdir / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        port_file = profile / "DevToolsActivePort"
        wait_for(lambda: self._alive() and port_file.exists() and "\n" in port_file.read_text(), 60, "Chromium")
        port = int(port_file.read_text().splitlines()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"]
        self._stack = contextlib.ExitStack()
        self.ws: ClientConnection = self._stack.enter_context(
            connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024)
        )
        self._ids = itertools.count(1)
        self.replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise CDPError(f"Chromium exited {self.proc.returncode}")
        return True

    # -- the protocol ------------------------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        msg_id = next(self._ids)
        self.ws.send(orjson.dumps({"id": msg_id, "method": method, "params": params or {}}).decode())
        return msg_id

    def _pump(self, timeout: float) -> None:
        try:
            msg = orjson.loads(self.ws.recv(timeout=timeout))
        except TimeoutError:
            return
        if "id" in msg:
            self.replies[msg["id"]] = msg
        else:
            self.events.append(msg)

    def reply(self, msg_id: int, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while msg_id not in self.replies:
            if time.monotonic() > deadline:
                raise CDPError(f"no reply to CDP message {msg_id} within {timeout}s")
            self._pump(max(0.01, deadline - time.monotonic()))
        msg = self.replies.pop(msg_id)
        if "error" in msg:
            raise CDPError(f"CDP error: {msg['error']}")
        result: dict[str, Any] = msg.get("result", {})
        return result

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        return self.reply(self.send(method, params), timeout)

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event["method"] == method:
                    params: dict[str, Any] = self.events.pop(i)["params"]
                    return params
            if time.monotonic() > deadline:
                raise CDPError(f"no {method} event within {timeout}s")
            self._pump(max(0.01, deadline - time.monotonic()))

    # -- what a test does --------------------------------------------------------------------------
    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise CDPError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", 60)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        """Uncaught exceptions and console errors so far (a blocked resource, a CSP violation)."""
        self._drain()
        found = []
        for e in self.events:
            if e["method"] == "Runtime.exceptionThrown":
                found.append(str(e["params"]["exceptionDetails"].get("exception", {}).get("description")))
            elif e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                found.append(e["params"]["entry"]["text"])
            elif e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                found.append(" ".join(str(a.get("value")) for a in e["params"]["args"]))
        return found

    def _drain(self) -> None:
        while True:
            before = len(self.events) + len(self.replies)
            self._pump(0.05)
            if len(self.events) + len(self.replies) == before:
                return

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
