"""The alias catalogue: which physical index each alias points at, changed atomically.

A swap rewrites ``aliases.json`` through a temporary file and ``os.replace`` under an exclusive
file lock, so readers see the old or the new catalogue and never half of one. Each entry keeps the
newest fencing token granted for its alias (recorded when a job acquires the lock, not only at
swaps); a swap is a compare-and-swap on the index the alias pointed at when the job started and
is refused with an older token, so a job whose lock was taken over can never move the alias,
even if its lock expired between its last check and the swap.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from sparkindex.errors import LockLost
from sparkindex.files import write_atomically
from sparkindex.targets.tantivy.errors import disk_errors_are_transient


class AliasCatalogue:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "aliases.json"
        self._lock_path = root / ".aliases.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with disk_errors_are_transient(f"alias catalogue {self.path}: opening its lock"):
            self.root.mkdir(parents=True, exist_ok=True)
            fh = open(self._lock_path, "a+b")  # noqa: SIM115 - closed below, after the unlock
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def read(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        return data

    def get(self, alias: str) -> str | None:
        entry = self.read().get(alias)
        return None if entry is None or entry.get("index") is None else str(entry["index"])

    def _write(self, data: dict[str, Any]) -> None:
        # a full or read-only disk: the old catalogue stands, a rerun retries
        with disk_errors_are_transient(f"alias catalogue {self.path}"):
            write_atomically(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))

    def observe_fence(self, alias: str, fence: int) -> None:
        """Remember the newest fencing token granted for *alias*; older ones can no longer swap."""
        with self._locked():
            data = self.read()
            entry = data.setdefault(alias, {"index": None, "fence": 0, "history": []})
            entry["fence"] = max(int(entry.get("fence", 0)), fence)
            self._write(data)

    def swap(self, alias: str, index: str, expected_previous: str | None, fence: int | None) -> None:
        """Compare-and-swap under the catalogue lock: the check and the move are one step."""
        with self._locked():
            data = self.read()
            entry = data.get(alias) or {"index": None, "fence": 0, "history": []}
            newest = int(entry.get("fence", 0))
            if fence is not None and fence < newest:
                raise LockLost(
                    f"alias {alias!r}: swap refused, fencing token {fence} is older than {newest} "
                    "(another job took the lock over)"
                )
            previous = entry.get("index")
            if previous != expected_previous:
                raise LockLost(
                    f"alias {alias!r}: swap refused, it points at {previous!r}, not {expected_previous!r} "
                    "as when this job started (another job moved it)"
                )
            history = [*entry.get("history", []), previous][-10:] if previous else entry.get("history", [])
            data[alias] = {
                "index": index,
                "fence": max(newest, fence or 0),
                "swapped_at": time.time(),
                "history": history,
            }
            self._write(data)
