"""A small tmpfs under the Tantivy index, which a fault fills to the last byte and then frees."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from pathlib import Path
from types import TracebackType

BALLAST = ".chaos-ballast"


class SmallDisk:
    def __init__(self, path: Path, size_mb: int) -> None:
        self.path, self.size_mb = path, size_mb

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.path)], check=True)

    def fill(self) -> int:
        """Write a ballast file until the disk refuses (ENOSPC); returns the bytes written."""
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(self.path / BALLAST, "ab", buffering=0) as f:
            try:
                while True:
                    written += f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
            with contextlib.suppress(OSError):  # the last few bytes, a block at a time
                while f.write(b"\0" * 4096):
                    written += 4096
        return written

    def free(self) -> None:
        (self.path / BALLAST).unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)

    def __enter__(self) -> SmallDisk:
        self.mount()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.unmount()
