"""A writer service whose Tantivy writer died writes no document off (found by the chaos
campaign: the disk under a Tantivy index was full for 10 s while a sync applied; once there was
room, the dead writer's next ``add_json`` raised "An index writer was killed", the rollback that
undoes a rejected document succeeded, and the document went to the dead letters as
"MappingRejected").

The writer's death cannot be timed from a test (it dies in a background flush), so the writer
here is Tantivy's own, and only the signal of its death is played: ``add_json`` raises the exact
error the campaign saw, while rollback and everything else are the real writer's. The replay of
the trial (``python -m chaos --seed 1 --only-trial 16``) checks the whole path on real processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from sparkindex.targets.tantivy.service import WriterService
from tests.targets.test_conformance import MAPPING

KILLED = (
    "An error occurred in a thread: 'An index writer was killed.. A worker thread encountered an error "
    "(io::Error most likely) or panicked.'"
)


class DiedWriter:
    """Tantivy's writer after its indexing thread died: adds fail; the rest is the real writer."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def add_json(self, _body: str) -> None:
        raise ValueError(KILLED)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _batch(ids: range) -> tuple[list[list[Any]], bytes]:
    bodies = [orjson.dumps({"_id": str(i), "name": f"item {i}", "n": i}) for i in ids]
    return [[str(i), "index", len(b)] for i, b in zip(ids, bodies, strict=True)], b"".join(bodies)


def test_a_dead_writer_ends_the_epoch_and_rejects_no_document(tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index"))
    index = target.create_version("shop", MAPPING)
    target.close()
    service = WriterService(tmp_path / "index" / index, heap_mb=16, threads=1, idle_s=60)
    items, payload = _batch(range(3))
    errors, generation = service.apply(items, payload)
    assert errors == {}
    service.commit()
    service.writer = DiedWriter(service.writer)
    items, payload = _batch(range(3, 6))
    errors, generation = service.apply(items, payload)
    assert errors == {}, f"documents written off for a dead writer: {errors}"
    failure = service.wait_durable(generation, 0.0)
    assert failure is not None and "writer failed" in failure, "the batch must not look durable"
    assert service.done.is_set(), "the epoch ends: clients redo what was not committed"
