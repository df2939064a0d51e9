"""What a Tantivy error means: a document that does not fit, or a writer that can write no more.

tantivy-py raises ValueError for both. A document that does not fit the mapping is rejected alone
(a dead letter); a writer whose indexing thread died (ENOSPC while flushing a segment, an I/O
error) answers every later document with the same ValueError, and those documents are fine: the
write must be retried once the disk has room, never written off. The library gives no other
signal than its message, so the message is read here, in one place.
"""

from __future__ import annotations

import errno
import re
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


#: what a full disk or a failing one says; "has room" or "is fixed", then a rerun redoes the step
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_BROKEN = (errno.EROFS, errno.EIO)
#: Tantivy (Rust) puts the errno in its message: "No space left on device (os error 28)"
_RUST_ERRNO = re.compile(r"\(os error (\d+)\)")


def _disk_errno(exc: BaseException) -> int | None:
    """The errno of a full or failing disk behind *exc* (Python's OSError or Tantivy's ValueError)."""
    if isinstance(exc, OSError):
        code = exc.errno
    elif isinstance(exc, ValueError) and (m := _RUST_ERRNO.search(str(exc))):
        code = int(m.group(1))
    elif isinstance(exc, ValueError) and "StorageFull" in str(exc):
        code = errno.ENOSPC
    else:
        return None
    return code if code in _DISK_FULL + _DISK_BROKEN else None


@contextmanager
def disk_errors_are_transient(what: str) -> Iterator[None]:
    """A full or failing disk while the driver writes a version's own files means "rerun once the
    disk is fixed": each such step (create, adopt, the catalogue) is redone whole by the rerun, so
    it becomes a :class:`TransientError` naming *what*: the CLI's one line and exit 3, never a
    traceback. Tantivy reports the same disk as a ValueError carrying the errno; any other error
    passes through as it is, so that no other fault is mistaken for the disk's."""
    try:
        yield
    except (OSError, ValueError) as exc:
        code = _disk_errno(exc)
        if code is None:
            raise
        advice = "rerun once the disk has room" if code in _DISK_FULL else "rerun once the disk is fixed"
        if isinstance(exc, OSError):
            where = f" ({exc.filename})" if exc.filename else ""
            detail = f"{exc.strerror or exc}{where}"
        else:
            detail = str(exc)
        raise TransientError(f"tantivy {what}: {detail}; {advice}") from exc
