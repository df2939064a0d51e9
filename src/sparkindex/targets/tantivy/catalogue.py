"""The alias catalogue: which physical index each alias points at, changed atomically.

A swap rewrites ``aliases.json`` through a temporary file and ``os.replace`` under an exclusive
file lock, so readers see the old or the new catalogue and never half of one. Each entry keeps the
fencing token of the swap that wrote it; a swap carrying an older token is refused, so a job whose
lock was taken over can never move the alias (guarantee 4).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from sparkindex.errors import LockLost


class AliasCatalogue:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "aliases.json"
        self._lock_path = root / ".aliases.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+b") as fh:
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
        return None if entry is None else str(entry["index"])

    def swap(self, alias: str, index: str, fence: int) -> str | None:
        with self._locked():
            data = self.read()
            entry = data.get(alias)
            if entry is not None and fence < int(entry.get("fence", 0)):
                raise LockLost(
                    f"alias {alias!r}: swap refused, fencing token {fence} is older than {entry['fence']} "
                    "(another job took the lock over)"
                )
            previous = None if entry is None else str(entry["index"])
            history = [] if entry is None else [*entry.get("history", []), previous][-10:]
            data[alias] = {"index": index, "fence": fence, "swapped_at": time.time(), "history": history}
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            return previous
