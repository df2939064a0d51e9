"""What a Tantivy error means: a document that does not fit, or a writer that can write no more.

tantivy-py raises ValueError for both. A document that does not fit the mapping is rejected alone
(a dead letter); a writer whose indexing thread died (ENOSPC while flushing a segment, an I/O
error) answers every later document with the same ValueError, and those documents are fine: the
write must be retried once the disk has room, never written off. The library gives no other
signal than its message, so the message is read here, in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sparkindex.errors import TransientError

#: how tantivy says its writer is dead, and how it reports a full disk or another I/O failure
_DEAD_WRITER = ("index writer was killed", "StorageFull", "No space left on device", "IoError")


def writer_failed(exc: BaseException) -> bool:
    """Whether *exc* is the writer (or its disk) failing rather than one document being refused."""
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, ValueError) and any(sign in str(exc) for sign in _DEAD_WRITER)


@contextmanager
def disk_errors_are_transient(what: str) -> Iterator[None]:
    """An OS error while the driver writes a version's own files (a full or read-only disk) means
    "rerun once the disk is fixed": each such step (create, adopt, finish) is redone whole by the
    rerun, so it becomes a :class:`TransientError` naming *what*, the CLI's one line and exit 3,
    never a traceback."""
    try:
        yield
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise TransientError(f"tantivy {what}: {exc.strerror or exc}{where}; rerun once the disk has room") from exc
