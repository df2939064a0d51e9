"""A small disk that a fault fills to the last byte and then frees: a tmpfs of a few MB.

A full disk under the index is a fault that real deployments meet and tests rarely make: writes
fail with ENOSPC in the middle of a commit, then space comes back and the work must carry on. A
tmpfs of its own makes it real (the kernel refuses the write) without touching the machine's disk,
and its size bounds what a ballast file must write to fill it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

BALLAST = ".chaos-ballast"


class SmallDisk:
    """A tmpfs of size_mb MiB mounted at path (we are root); ``fill()`` leaves it 0 bytes free."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path, self.size_mb = path, size_mb
        self.ballast = path / BALLAST

    @property
    def mounted(self) -> bool:
        """True if a tmpfs is mounted exactly at path (read from /proc/self/mountinfo)."""
        target = str(self.path.resolve())
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            for line in info:
                fields = line.split()
                # The mount point is field 5 (space and the like octal-escaped); the type follows " - ".
                mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                fs_type = fields[fields.index("-") + 1]
                if mount_point == target and fs_type == "tmpfs":
                    return True
        return False

    def mount(self) -> None:
        """Mount the tmpfs (nothing if it is mounted already)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.mounted:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.path)],
                capture_output=True,
                check=True,
            )

    def available(self) -> int:
        """Bytes an unprivileged writer could still write."""
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def fill(self) -> int:
        """Append to the ballast file until the kernel says ENOSPC, in ever smaller writes down to one
        byte, so not a byte is left free. Returns the bytes written."""
        written = 0
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 1 << 16, 1 << 12, 1 << 8, 1):
                block = b"\0" * size
                while True:
                    try:
                        written += os.write(fd, block)  # a short write is fine: the next one fails
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        """Remove the ballast: the space is back at once."""
        self.ballast.unlink(missing_ok=True)

    def unmount(self) -> None:
        """Unmount; lazily (``umount -l``) if a process still has files open there."""
        if not self.mounted:
            return
        done = subprocess.run(["umount", str(self.path)], capture_output=True, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=True)

    def __enter__(self) -> Self:
        self.mount()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with contextlib.suppress(OSError):
            self.free()
        self.unmount()
