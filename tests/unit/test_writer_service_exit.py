"""A Tantivy writer service on its way out must not swallow the next request.

After answering ``finish`` (or deciding to exit when idle) the service keeps its listening socket
until its accept loop notices; a client that connects in that window is reset. Finalize calls
``finish_version`` without a retry, and anything may write to a version after it was finished, so
a request that meets an exiting service must reach a live one instead. The race is timing-bound:
the test repeats the sequence enough times to meet it.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

MAPPING = {"properties": {"name": {"type": "text"}}}


def test_requests_right_after_a_finish_succeed(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path, writer_heap_mb=32, writer_threads=1))
    ix = target.create_version("t", MAPPING)
    rounds = 15
    for n in range(rounds):  # finalize, a rerun of it, a write to the finished version: each meets an exiting service
        target.finish_version(ix)
        batch = [BulkItem(f"d|{n}|{i}", orjson.dumps({"name": f"doc {i} ü"}), f"h{i}") for i in range(20)]
        assert all(r.ok for r in target.bulk(ix, batch))
        target.finish_version(ix)
    assert target.count(ix) == rounds * 20
