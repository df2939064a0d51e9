"""The wall clock of one process (and what it starts) jumped, while it runs.

Leases, fences and timeouts that read the wall clock are where a clock step (NTP, a VM resumed, an
operator's ``date -s``) bites. The machine's clock cannot be moved for one process, so the process
gets libfaketime (Debian's ``libfaketime``) preloaded, with its offset in a file that ``jump()``
rewrites and that the library re-reads on every call: only CLOCK_REALTIME moves (``time.time()``,
``System.currentTimeMillis()``); CLOCK_MONOTONIC does not, as with a real clock step.

What it takes for a process tree with a JVM in it (a PySpark driver) to keep working under the
preload, all checked by tests/chaos/test_tools.py with Debian 12's libfaketime 0.9.10:

- ``FAKETIME_DONT_FAKE_MONOTONIC=1``: otherwise the monotonic clock moves too (and the JVM hangs,
  says libfaketime's README).
- ``FAKETIME_FORCE_MONOTONIC_FIX=0``: on glibc >= 2.30 the library turns a "fix" on by itself that,
  together with the line above, makes every timed wait on a monotonic condition variable return at
  once. The JVM's ``Object.wait(ms)``, ``LockSupport.parkNanos`` and its own threads then spin, and a
  local PySpark session took over 90 s to start instead of 6.
- A small shim preloaded before libfaketime (:data:`SLEEP_FIX_C`, built with gcc on first use):
  0.9.10's ``clock_nanosleep`` converts absolute CLOCK_MONOTONIC deadlines as if they were faked
  wall-clock times, and fails with EINVAL. CPython's ``time.sleep`` sleeps exactly that way, so every
  ``time.sleep`` raised ``OSError: [Errno 22]`` (PySpark's gateway launch among them). Fixed
  upstream in 0.9.11, which Debian 12 does not have.
- ``NO_FAKE_STAT=1``: file times stay the disk's. A clock step does not change the times of files
  already written, and the process is not shown every file as modified in the future.

The offset is written with a "." as decimal separator; libfaketime reads it with ``atof``, so in a
process that switched to a locale whose separator is "," a fraction would be dropped (whole seconds
are always exact).

libfaketime leaves /dev/shm/faketime_{sem,shm}_<pid> behind for every process killed under it;
:meth:`ClockJump.close` removes those of processes that are gone.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Self

from chaos import procs

LIBFAKETIME_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1")

SLEEP_FIX_C = r"""
/* clock_nanosleep for processes under libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1.
   Preloaded BEFORE libfaketime, so this definition is the one every caller gets. Monotonic sleeps go
   straight to the kernel (that clock is not faked); an absolute CLOCK_REALTIME deadline, given in
   faked time, is moved back by the current offset (faked now - real now). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem) {
    struct timespec real_req;
    if (req == NULL) return EFAULT;
    real_req = *req;
    if (clock_id == CLOCK_REALTIME && (flags & TIMER_ABSTIME)) {
        struct timespec faked, real;
        clock_gettime(CLOCK_REALTIME, &faked);              /* libfaketime's */
        syscall(SYS_clock_gettime, CLOCK_REALTIME, &real);  /* the kernel's */
        long long offset = (faked.tv_sec - real.tv_sec) * 1000000000LL + (faked.tv_nsec - real.tv_nsec);
        long long deadline = req->tv_sec * 1000000000LL + req->tv_nsec - offset;
        real_req.tv_sec = deadline / 1000000000LL;
        real_req.tv_nsec = deadline % 1000000000LL;
        if (real_req.tv_nsec < 0) { real_req.tv_nsec += 1000000000LL; real_req.tv_sec -= 1; }
    }
    if (syscall(SYS_clock_nanosleep, clock_id, flags, &real_req, rem) == -1) return errno;
    return 0;
}
"""


def _apt_install(*packages: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", *packages]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=True)
        subprocess.run(install, env=env, capture_output=True, check=True)


def _find_libfaketime() -> Path | None:
    for pattern in LIBFAKETIME_GLOBS:
        for found in sorted(glob.glob(pattern)):
            return Path(found)
    return None


def ensure_faketime() -> Path:
    """The path of libfaketime.so.1 (Debian puts it in /usr/lib/<triplet>/faketime/), installing the
    ``faketime`` package (which brings ``libfaketime``) with apt-get if it is missing."""
    found = _find_libfaketime()
    if found is None:
        _apt_install("faketime")
        found = _find_libfaketime()
    if found is None:
        raise RuntimeError("libfaketime.so.1 not found after installing faketime")
    return found


def ensure_sleep_fix(directory: Path) -> Path:
    """Build the clock_nanosleep shim (:data:`SLEEP_FIX_C`) into directory, once; gcc installed if missing."""
    library = directory / "faketime-sleepfix.so"
    if library.exists():
        return library
    if shutil.which("gcc") is None:
        _apt_install("gcc", "libc6-dev")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "faketime-sleepfix.c"
    source.write_text(SLEEP_FIX_C, encoding="utf-8")
    partial = directory / f".faketime-sleepfix.{os.getpid()}.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(source)], capture_output=True, check=True)
    partial.replace(library)
    return library


def sweep_shm() -> list[str]:
    """Remove libfaketime's /dev/shm objects of processes that are gone; returns the names removed."""
    removed = []
    for path in glob.glob("/dev/shm/faketime_shm_*") + glob.glob("/dev/shm/sem.faketime_sem_*"):
        pid = path.rsplit("_", 1)[-1]
        if pid.isdigit() and not procs.alive(int(pid)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
    return removed


class ClockJump:
    """One process tree's wall clock, offset from the real one by what :meth:`jump` adds up.

    Start the process with ``env={**os.environ, **clock.env()}``; every process it starts inherits the
    preload and the same offset (a PySpark driver's JVM and its Python workers). FAKETIME itself must
    not be set in that environment: it would win over the file.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.file = directory / "faketimerc"
        self.offset = 0.0
        self.library = ensure_faketime()
        self.sleep_fix = ensure_sleep_fix(directory)
        self._write()

    def env(self) -> dict[str, str]:
        """The variables to merge into the child's environment."""
        preload = [str(self.sleep_fix), str(self.library)]
        if inherited := os.environ.get("LD_PRELOAD"):
            preload.append(inherited)
        return {
            "LD_PRELOAD": ":".join(preload),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
            "NO_FAKE_STAT": "1",
        }

    def jump(self, seconds: float) -> None:
        """Move the wall clock by +seconds (negative: back), on top of earlier jumps; the processes see it
        at their next clock read."""
        self.offset += seconds
        self._write()

    def reset(self) -> None:
        """Back to real time."""
        self.offset = 0.0
        self._write()

    def _write(self) -> None:
        # Replaced in one rename: a reader never sees a half-written file (it would read no offset).
        text = f"{self.offset:+.0f}" if self.offset == int(self.offset) else f"{self.offset:+.6f}"
        partial = self.file.with_name(f".{self.file.name}.{os.getpid()}")
        partial.write_text(text + "\n", encoding="utf-8")
        partial.replace(self.file)

    def close(self) -> None:
        """Clean what libfaketime left behind for processes that are gone."""
        sweep_shm()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def run_python_jumped(directory: Path, jump_s: float, code: str, *args: str, timeout: float = 120) -> str:
    """Run Python *code* (``python -c``) with *args* in a process whose wall clock is *jump_s*
    seconds off; its last line of output. Raises when it fails."""
    with ClockJump(directory) as clock:
        clock.jump(jump_s)
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **clock.env()},
        )
    if done.returncode != 0:
        raise RuntimeError(f"the process with a clock {jump_s:+g}s off failed: {done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]
