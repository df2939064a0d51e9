"""The driver JVM's class-data archive: made once, adopted only when complete, never fatal.

* No archive: this JVM writes one at exit, to a dump of its own.
* Another JVM's dump still being written: start without (one archive is enough).
* A settled dump becomes the archive; later starts map it.
* A damaged archive (truncated: it stops a JVM from starting) is dropped and the session starts
  anyway (a real JVM, in a subprocess: the test session's JVM is already up).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.e2e.shop import wait_for

from sparkindex.spark.cds import DUMP_SETTLED_S, class_archive


def test_no_archive_makes_one_at_exit(tmp_path: Path) -> None:
    first = class_archive(tmp_path)
    assert first.archive is None
    assert f"-XX:ArchiveClassesAtExit={tmp_path}" in first.options and f".dump-{os.getpid()}" in first.options


def test_a_dump_in_progress_is_left_alone(tmp_path: Path) -> None:
    dump = Path(class_archive(tmp_path).options.split("=", 1)[1].split()[0])
    dump.write_bytes(b"half written")
    again = class_archive(tmp_path)
    assert again.archive is None and "Archive" not in again.options, "no second dump, no half-written archive"
    assert dump.exists()


def test_a_settled_dump_becomes_the_archive(tmp_path: Path) -> None:
    dump = Path(class_archive(tmp_path).options.split("=", 1)[1].split()[0])
    dump.write_bytes(b"complete")
    old = time.time() - DUMP_SETTLED_S - 1
    os.utime(dump, (old, old))
    adopted = class_archive(tmp_path)
    assert adopted.archive is not None and adopted.archive.read_bytes() == b"complete"
    assert f"-XX:SharedArchiveFile={adopted.archive}" in adopted.options
    assert not dump.exists()


SESSION = (
    "from sparkindex.config.connections import SparkConfig\n"
    "from sparkindex.spark.session import build_session\n"
    "spark = build_session(SparkConfig(master='local[1]'))\n"
    "print(spark.range(3).count())\n"
)


def start_session(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKINDEX_CACHE_DIR": str(cache)}
    run = subprocess.run(
        [sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=300, env=env, cwd=cache
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "3"
    return run


@pytest.mark.slow
def test_a_damaged_archive_is_dropped_and_the_session_starts(tmp_path: Path) -> None:
    start_session(tmp_path)  # its JVM writes a dump while it exits
    directory = tmp_path / "cds"
    sizes: list[int] = []

    def dump_written() -> bool:
        dumps = list(directory.glob("*.dump-*"))
        sizes.append(dumps[0].stat().st_size if dumps else 0)
        return len(sizes) > 10 and sizes[-1] > 1_000_000 and len(set(sizes[-10:])) == 1

    wait_for(dump_written, 120, "the JVM to finish writing its class archive", every=0.2)
    [dump] = directory.glob("*.dump-*")
    with open(dump, "r+b") as fh:  # cut short, as by a kill while the JVM wrote it
        fh.truncate(dump.stat().st_size // 2)
    old = time.time() - DUMP_SETTLED_S - 1
    os.utime(dump, (old, old))

    start_session(tmp_path)  # adopts the damaged archive, which keeps the JVM from starting

    assert not dump.exists(), "the settled dump was adopted as the archive"
    assert not list(directory.glob("*.jsa")), "the damaged archive was dropped"
    assert not list(tmp_path.glob("hs_err_pid*.log")), "the refused JVM's crash log stays in the cache"
