"""Class data sharing for the driver JVM: Spark's classes loaded from an archive, not parsed again.

Starting the JVM is most of a small reindex's fixed cost: about 10 s of CPU on two cores, spent
loading and verifying the same classes every time. A dynamic CDS archive (JDK 13+) holds them
ready to map: measured here, session start 10.6-16 s -> 4.6-5.7 s. The first run has its JVM
write the archive when it exits (``-XX:ArchiveClassesAtExit``, to a file of its own); a later
run adopts that file once it is complete and starts from it (``-XX:SharedArchiveFile``).

A damaged archive stops the JVM from starting at all (a truncated one does: measured), so a
session that fails to start with an archive deletes it and starts again without one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

#: a dump older than this is complete (the JVM writes it in a few seconds while exiting)
DUMP_SETTLED_S = 60.0
#: the JVM's own notes about classes it cannot archive (signed JARs) stay out of the logs
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


@dataclass(frozen=True)
class ClassArchive:
    """The JVM options for this start and the archive they use (None while one is being made)."""

    options: str
    archive: Path | None

    def discard(self) -> None:
        if self.archive is not None:
            self.archive.unlink(missing_ok=True)


def cache_dir() -> Path:
    base = os.environ.get("SPARKINDEX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sparkindex"
    )
    return Path(base) / "cds"


def _key() -> str:
    """The archive belongs to one JDK build and one Spark installation (the classpath it maps)."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = os.path.realpath(os.path.join(home, "bin", "java") if home else shutil.which("java") or "java")
    try:
        built = os.stat(java).st_mtime_ns  # an upgrade in place replaces the binary
    except OSError:
        built = 0
    jars = os.path.realpath(os.path.dirname(pyspark.__file__))  # the JVM's classpath: each venv its own
    return hashlib.sha256(f"{pyspark.__version__}|{java}|{built}|{jars}".encode()).hexdigest()[:16]


def class_archive(directory: Path | None = None) -> ClassArchive:
    """Options for this JVM start; never raises (no archive is a slower start, not an error)."""
    directory = directory or cache_dir()
    try:
        return _class_archive(directory)
    except OSError:  # a read-only cache, a dump another process adopted a moment ago
        return ClassArchive("", None)


def _class_archive(directory: Path) -> ClassArchive:
    archive = directory / f"spark-{_key()}.jsa"
    errors = f"-XX:ErrorFile={directory}/hs_err_pid%p.log"  # not in the user's working directory
    dumps = sorted(directory.glob(f"{archive.name}.dump-*"))
    if not archive.exists():
        settled = [d for d in dumps if _age(d) > DUMP_SETTLED_S]
        if settled:
            os.replace(settled[0], archive)
            dumps.remove(settled[0])
            _prune(directory, keep=archive)
    if archive.exists():
        for extra in dumps:  # others' dumps, written at the same time as the adopted one
            if _age(extra) > DUMP_SETTLED_S:
                extra.unlink(missing_ok=True)
        return ClassArchive(f"-XX:SharedArchiveFile={archive} {errors} {QUIET}", archive)
    if dumps:
        return ClassArchive(errors, None)  # another JVM is writing one: one archive is enough
    directory.mkdir(parents=True, exist_ok=True)
    return ClassArchive(f"-XX:ArchiveClassesAtExit={archive}.dump-{os.getpid()} {errors} {QUIET}", None)


def _age(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def _prune(directory: Path, keep: Path) -> None:
    """Archives of other JDKs, Sparks or interpreters (about 150 MB each) and their old dumps."""
    for other in directory.glob("spark-*.jsa*"):
        if other != keep and not other.name.startswith(keep.name) and _age(other) > DUMP_SETTLED_S:
            other.unlink(missing_ok=True)
