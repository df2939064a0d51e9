"""Running the preflight as a user does (the CLI) or in-process, and reading its answers."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sparkindex.config import load_pipeline
from sparkindex.preflight import Check, Options, run_checks

JSON_KEYS = {"name", "status", "detail", "fix"}


def checks_of(config: Path, **options: Any) -> dict[str, Check]:
    """Every check of ``sparkindex check -c config``, in-process, by name."""
    found = run_checks(load_pipeline(config), Options(**options))
    names = [c.name for c in found]
    assert len(names) == len(set(names)), f"check names repeat: {names}"
    return {c.name: c for c in found}


def statuses(checks: dict[str, Check], prefix: str) -> dict[str, str]:
    return {name: c.status for name, c in checks.items() if name.startswith(prefix)}


def run_cli(cli: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=timeout)


def check_json(cli: Path, config: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``sparkindex check --json``: the process and its last stdout line, decoded."""
    run = run_cli(cli, "check", "-c", str(config), "--json", *extra)
    lines = run.stdout.strip().splitlines()
    assert lines, f"no JSON on stdout (exit {run.returncode}):\n{run.stderr[-3000:]}"
    return run, orjson.loads(lines[-1])


def fail_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("FAIL ")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port() -> int:
    """A port nothing listens on (bound, then released: the kernel does not hand it out again soon)."""
    return free_port()


def sql_of(fix: str | None, statements: Sequence[str] = ("ALTER ", "CREATE ", "SET ", "GRANT ")) -> str:
    """The SQL statement a fix names, cut where its prose begins (``; then``, ``, and``, `` (``)."""
    assert fix is not None
    start = min(i for i in (fix.find(s) for s in statements) if i >= 0)
    text = fix[start:]
    for end in ("; ", ", and", ", set by", " (as ", ", or ", " if "):
        text = text.split(end)[0]
    return text.strip()
