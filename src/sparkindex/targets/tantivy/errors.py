"""What a Tantivy error means: a document that does not fit, or a writer that can write no more.

tantivy-py raises ValueError for both. A document that does not fit the mapping is rejected alone
(a dead letter); a writer whose indexing thread died (ENOSPC while flushing a segment, an I/O
error) answers every later document with the same ValueError, and those documents are fine: the
write must be retried once the disk has room, never written off. The library gives no other
signal than its message, so the message is read here, in one place.
"""

from __future__ import annotations

#: how tantivy says its writer is dead, and how it reports a full disk or another I/O failure
_DEAD_WRITER = ("index writer was killed", "StorageFull", "No space left on device", "IoError")


def writer_failed(exc: BaseException) -> bool:
    """Whether *exc* is the writer (or its disk) failing rather than one document being refused."""
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, ValueError) and any(sign in str(exc) for sign in _DEAD_WRITER)
