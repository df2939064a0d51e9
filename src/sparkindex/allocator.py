"""glibc's allocator, told to keep large blocks out of its heaps in the processes that build documents.

Each partition attempt's Tantivy stage grows an indexing arena of up to ``stage_heap_mb`` in
blocks of a megabyte or so, then frees it when the stage is sealed. glibc serves blocks above
its *mmap threshold* with fresh mappings that go back to the kernel on ``free``, but the
threshold is dynamic: freeing such a mapping raises it to that block's size, so from the next
partition on the same blocks come from the malloc heaps, where the gaps left by what is still
alive keep them resident. Measured on the worker's stage loop (large documents, 10,000-row
partitions): peak RSS climbed 251 -> 355 MB over 30 partitions, and a real worker kept
climbing for its whole life; with the threshold fixed at 1 MB it stayed at 206 -> 215 MB, and
the loop ran no slower (fewer faults on pages the heaps had given back piecemeal).

Setting the threshold with ``mallopt`` also switches its dynamic adjustment off. It is a
process-wide setting, inherited by forks, so the Spark daemon applies it before it forks its
workers. Elsewhere than glibc (musl, macOS) there is no such knob and nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

#: Blocks of at least this size get a mapping of their own (glibc's default starts at 128 KiB
#: and drifts up to 32 MiB).
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def glibc() -> ctypes.CDLL | None:
    """This process's C library, if it is glibc."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def tune_allocator(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at *threshold* bytes for this process (and its future forks);
    False where the C library is not glibc or refuses the value."""
    libc = glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(threshold)))
    if not ok:
        log.debug("glibc refused an mmap threshold of %d bytes", threshold)
    return ok
