"""The document-building processes run with glibc's mmap threshold fixed (sparkindex/allocator.py):
every Spark Python worker (forked from sparkindex's daemon), and any process that calls it.

What is checked is the behaviour the fix is for, not a setting (glibc has no getter): after a
24 MiB block was freed, glibc's dynamic threshold would serve a 16 MiB block from its heap; fixed
at 1 MiB, the block gets a mapping of its own, which goes back to the kernel when freed. A
chunk's header (the word before it) carries glibc's IS_MMAPPED bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from sparkindex.allocator import glibc

pytestmark = pytest.mark.skipif(glibc() is None, reason="the knob is glibc's")

# Sizes: glibc serves a request from a free chunk of its heap whatever the threshold, so the
# block must be larger than any free chunk a busy, reused Spark worker's heap may hold (2 MiB was
# not, once: CI saw four reused workers answer False); and the freed block must stay under
# glibc's 32 MiB cap on the dynamic threshold, so an untuned process still shows it rising.
PROBE = """
import ctypes
def served_by_mmap_after_a_larger_free():
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    big = libc.malloc(24 << 20)
    libc.free(big)  # a dynamic threshold rises to 24 MiB here
    block = libc.malloc(16 << 20)
    header = ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value
    libc.free(block)
    return bool(header & 2)
"""


def test_spark_python_workers_keep_large_blocks_out_of_the_heaps(spark: Any) -> None:
    def probe(_: Any) -> Any:  # defined here: pickled by value, as the product's task functions are
        scope: dict[str, Any] = {}
        exec(PROBE, scope)
        yield scope["served_by_mmap_after_a_larger_free"]()

    seen = spark.sparkContext.parallelize(range(4), 4).mapPartitions(probe).collect()
    assert seen == [True] * 4


@pytest.mark.parametrize("tuned", [False, True])
def test_the_threshold_stays_where_it_was_set(tuned: bool) -> None:
    """Untuned, the probe sees the dynamic threshold (so it can tell the two apart)."""
    if not tuned and any(os.environ.get(v) for v in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES", "LD_PRELOAD")):
        pytest.skip("the environment sets the allocator up itself")
    call = "from sparkindex.allocator import tune_allocator; assert tune_allocator(); " if tuned else ""
    script = f"{PROBE}\n{call}print(served_by_mmap_after_a_larger_free())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tuned)
