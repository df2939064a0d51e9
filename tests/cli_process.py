"""A CLI process under test whose output goes to files, never to pipes.

A long-lived ``sparkindex sync`` or ``reindex`` writes logs (Spark's Java stack traces among them)
for as long as it runs. Behind ``stderr=PIPE`` that nobody reads until the end, the 64 KiB pipe
fills and the process blocks on its next log line: it stops applying changes, and the test times
out waiting for something the process would have done. Files never fill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any


class LoggedProcess(subprocess.Popen[str]):
    """``subprocess.Popen`` with stdout and stderr in ``logs/``; ``communicate`` reads them back."""

    def __init__(self, args: list[str], logs: Path, **kwargs: Any) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        name = Path(args[0]).name + "-" + (args[1] if len(args) > 1 else "run")
        self.out_path = _fresh(logs, name, "out")
        self.err_path = _fresh(logs, name, "err")
        with open(self.out_path, "w", encoding="utf-8") as out, open(self.err_path, "w", encoding="utf-8") as err:
            super().__init__(args, stdout=out, stderr=err, text=True, **kwargs)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.stdout_text(), self.stderr_text()

    def stdout_text(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    def stderr_text(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def assert_running(self, what: str) -> bool:
        """Fail at once, with the process's last words, when it ended while a test waits on it
        (True otherwise, so that it chains in a wait's condition)."""
        if self.poll() is not None:
            raise AssertionError(f"{what} exited with {self.returncode}:\n{self.stderr_text()[-3000:]}")
        return True

    def kill_group(self) -> None:
        """SIGKILL the process group (a CLI started with ``start_new_session`` shares it with its JVM)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.wait(timeout=60)


def _fresh(logs: Path, name: str, stream: str) -> Path:
    n = 0
    while (logs / f"{name}.{n}.{stream}").exists():
        n += 1
    return logs / f"{name}.{n}.{stream}"
