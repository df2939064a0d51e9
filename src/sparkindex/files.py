"""Small files replaced whole or not at all.

What later runs read back (a Tantivy version's ``meta.json``, its list of managed files, its
state, the alias catalogue; the pipeline file ``init`` writes) must never be left half written:
a truncated one (a full disk, a kill between the truncate and the write) stops every rerun with a
decoding error. So each is written to a temporary file beside it, synced, and renamed over the
old one: a failure leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Replace *path* with *data*; on any error the old file stands and no temporary is left
    (as far as the disk allows: the error raised is always the write's own)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    # the rename itself made durable: a crash now cannot bring the old file back under a later step
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
