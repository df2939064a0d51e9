"""Long commands started from the server (reindex, verify, repair, re-drive) as CLI subprocesses.

Each runs ``sparkindex <command> -c <pipeline> ... --json`` in its own session with its output in
files, not pipes: the server stays responsive, a crash of the job cannot take the server down, and
the end of the server (Ctrl-C, a crash) neither signals the job nor breaks its output. The job's
state lives in the coordination store anyway; what the server keeps is the command's exit code
and the JSON object on its last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from sparkindex.config.secrets import redact_url

#: What an exit code means; every command keeps to these (:mod:`sparkindex.cli.app`).
OUTCOMES = {0: "done", 1: "done with errors", 2: "bad usage or config", 3: "failed or stopped"}
_KEEP = 100  # finished actions remembered
_TAIL = 4000  # characters of stderr kept for the page


def sparkindex_command() -> list[str]:
    """The ``sparkindex`` executable of this installation (the one beside this interpreter)."""
    beside = Path(sys.executable).parent / "sparkindex"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("sparkindex")
    if found:
        return [found]
    return [sys.executable, "-c", "from sparkindex.cli.app import main; main()"]


@dataclass
class Action:
    id: str
    kind: str
    argv: list[str]
    started_at: float
    log_dir: Path
    pid: int | None = None
    state: str = "running"  # running | finished
    exit_code: int | None = None
    finished_at: float | None = None
    result: Any = None
    stderr_tail: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    program: str = "sparkindex"
    finished: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def outcome(self) -> str | None:
        if self.exit_code is None:
            return None
        return OUTCOMES.get(self.exit_code, f"exit code {self.exit_code}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "command": " ".join([self.program, *self.argv]),
            "pid": self.pid,
            "state": self.state,
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "stderr_tail": self.stderr_tail,
            **self.meta,
        }


class ActionRunner:
    def __init__(self, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = env
        self.actions: OrderedDict[str, Action] = OrderedDict()
        self._lock = threading.Lock()  # the loop starts actions; reader threads (ticks, scrapes) list them
        self._ids = itertools.count(1)
        self._prefix = time.strftime("%Y%m%d-%H%M%S")
        self._tasks: set[asyncio.Task[None]] = set()

    def running(self, kind: str | None = None) -> list[Action]:
        with self._lock:
            return [a for a in self.actions.values() if a.state == "running" and (kind is None or a.kind == kind)]

    def get(self, action_id: str) -> Action | None:
        return self.actions.get(action_id)

    def newest_first(self) -> list[Action]:
        with self._lock:
            return list(reversed(self.actions.values()))

    def latest(self, kinds: tuple[str, ...]) -> Action | None:
        return next((a for a in self.newest_first() if a.kind in kinds and a.state == "finished"), None)

    async def start(self, kind: str, argv: list[str], program: list[str] | None = None, **meta: Any) -> Action:
        """Start ``sparkindex *argv*`` (or *program* *argv*); a task waits for it and records its
        outcome (*meta*: shown with it)."""
        action_id = f"{self._prefix}-{next(self._ids)}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = program or sparkindex_command()
        label = (
            "sparkindex"
            if program is None
            else " ".join(Path(program[0]).name if i == 0 else a for i, a in enumerate(program))
        )
        action = Action(action_id, kind, argv, time.time(), self.log_dir, meta=meta, program=label)
        with (
            (self.log_dir / f"{action_id}.out").open("wb") as out,
            (self.log_dir / f"{action_id}.err").open("wb") as err,
        ):
            proc = await asyncio.create_subprocess_exec(
                *command,
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # Ctrl-C on the server's terminal is not the job's
                env=self.env,
            )
        action.pid = proc.pid
        with self._lock:
            self.actions[action_id] = action
        self._forget_old()
        self._tasks.add(task := asyncio.get_running_loop().create_task(self._wait(action, proc)))
        task.add_done_callback(self._tasks.discard)
        return action

    async def _wait(self, action: Action, proc: asyncio.subprocess.Process) -> None:
        self._finish(action, await proc.wait())

    def _finish(self, action: Action, code: int) -> None:
        stdout = (action.log_dir / f"{action.id}.out").read_bytes()
        with (action.log_dir / f"{action.id}.err").open("rb") as f:  # hours of progress bars: read the end
            f.seek(max(0, f.seek(0, os.SEEK_END) - 256 * 1024))
            stderr = f.read().decode("utf-8", "replace")
        lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]
        result: Any = None
        if lines:
            with contextlib.suppress(orjson.JSONDecodeError):
                result = orjson.loads(lines[-1])
        action.result = result
        action.stderr_tail = redact_url(_strip_progress(stderr))[-_TAIL:]
        action.exit_code = code
        action.finished_at = time.time()
        action.state = "finished"
        action.finished.set()

    def _forget_old(self) -> None:
        with self._lock:
            finished = [k for k, a in self.actions.items() if a.state == "finished"]
            doomed = [self.actions.pop(k) for k in finished[: max(0, len(finished) - _KEEP)]]
        for action in doomed:
            for suffix in (".out", ".err"):
                (action.log_dir / f"{action.id}{suffix}").unlink(missing_ok=True)


def _strip_progress(text: str) -> str:
    """Progress bars redraw with carriage returns and ANSI codes: keep the last state of each line."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines())


def env_for_children(state_dir: Path) -> dict[str, str]:
    """The server's environment for its commands, without the server's own token (a job has no
    use for it), keeping their state where the server keeps its (``SPARKINDEX_STATE_DIR``)."""
    from sparkindex.config.model import STATE_DIR_ENV
    from sparkindex.server.auth import TOKEN_ENV

    return {**{k: v for k, v in os.environ.items() if k != TOKEN_ENV}, STATE_DIR_ENV: str(state_dir)}
