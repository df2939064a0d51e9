"""Tantivy on a full disk: what fails is the disk, never the documents (found by the chaos
campaign: a disk filled under the index killed a stage's writer, and every later
document of that attempt was dead-lettered as "MappingRejected").

A writer whose indexing thread hit ENOSPC is dead; tantivy-py then answers every ``add_json``
with a ValueError, the same class it uses for a document that does not fit the mapping. Those
documents are fine: the attempt must stop (a transient error parks the partition, and a later
claim reads the same rows again once there is room), not write them off.

Real parts: Tantivy on a tmpfs of its own, filled to the last byte (``chaos.disk.SmallDisk``;
the tests run as root, as the chaos campaign does).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos.disk import SmallDisk

from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.errors import TransientError
from sparkindex.keys import sort_key
from sparkindex.targets.base import BulkItem, BulkItemResult
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from tests.targets.test_conformance import MAPPING

WORDS = " ".join(f"w{i}x{i * 7919 % 10007}" for i in range(4000))  # ~40 KB of distinct terms


def big_doc(i: int) -> BulkItem:
    body = {"name": f"{WORDS} {i}", "n": i, "tag": f"t{i}"}
    source = dumps_document(body)
    return BulkItem(str(i), source, content_hash(source), sort_key=sort_key([i]), fields=body)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with SmallDisk(tmp_path / "disk", 48) as small:
        yield small
        small.free()


def test_a_stage_whose_writer_died_of_a_full_disk_rejects_no_document(disk: SmallDisk) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=disk.path / "index", stage_heap_mb=16, writer_threads=1))
    index = target.create_version("shop", MAPPING)
    stage = target.open_stage(index, "p1.1.1")
    assert stage is not None
    disk.fill()
    rejected: list[BulkItemResult] = []
    with pytest.raises(TransientError, match=r"(?i)disk|space|writer"):
        for start in range(0, 4000, 100):  # far more than the writer's heap: it must flush a segment
            rejected += stage.add([big_doc(i) for i in range(start, start + 100)])
    assert rejected == [], f"documents written off for a full disk: {rejected[:2]}"
    stage.discard()


def test_a_stage_opened_on_a_full_disk_is_transient(disk: SmallDisk) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=disk.path / "index", stage_heap_mb=16, writer_threads=1))
    index = target.create_version("shop", MAPPING)
    disk.fill()
    with pytest.raises(TransientError):
        target.open_stage(index, "p1.1.1")


@pytest.mark.parametrize("unsynced", [False, True], ids=["bulk", "unsynced"])
def test_the_writer_service_on_a_full_disk_rejects_no_document(disk: SmallDisk, unsynced: bool) -> None:
    """Writes straight into an index go through the version's writer service: a writer killed by
    a full disk ends the service's epoch (unsynced batches are redone), and the bulk fails as
    transient; no item comes back as rejected."""
    target = TantivyTarget(
        TantivyTargetConfig(root=disk.path / "index", writer_heap_mb=16, writer_threads=1, lock_timeout_s=5)
    )
    index = target.create_version("shop", MAPPING)
    target.bulk(index, [big_doc(0)])  # the service runs
    disk.fill()
    results: list[BulkItemResult] = []
    try:
        with pytest.raises(TransientError):
            for start in range(1, 4000, 100):
                batch = [big_doc(i) for i in range(start, start + 100)]
                results += target.bulk_unsynced(index, batch)[0] if unsynced else target.bulk(index, batch)
        assert [r for r in results if not r.ok] == [], "documents written off for a full disk"
    finally:
        disk.free()
        target.close()


def test_a_reindex_onto_a_full_disk_says_so_and_exits_3(tmp_path: Path, cli: Path) -> None:
    """The driver's own writes to the index root (the alias catalogue, a new version) on a full
    disk: a clear error and exit 3 (rerun once there is room), no traceback."""
    from sparkindex.demo.shop import generate_shop, write_demo_pipeline

    generate_shop(tmp_path / "shop.db", products=50)
    pipeline = write_demo_pipeline(tmp_path)
    with SmallDisk(tmp_path / "index", 4) as small:
        small.fill()
        done = subprocess.run(
            [str(cli), "reindex", "-c", str(pipeline), "--json"], capture_output=True, text=True, timeout=300
        )
    assert done.returncode == 3, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "No space left on device" in done.stderr and str(tmp_path / "index") in done.stderr, done.stderr[-2000:]


def test_adopting_stages_on_a_full_disk_is_transient_and_a_retry_adopts_them(disk: SmallDisk) -> None:
    """The finish adopts the sealed stages by rewriting the version's meta.json and its list of
    managed files. On a full disk that is a transient error naming the version (exit 3, a rerun
    finishes the job), not an OSError the CLI prints as a traceback (found by the chaos campaign:
    the disk filled while the driver finished). Once there is room, the same adoption adds every
    document, once."""
    target = TantivyTarget(TantivyTargetConfig(root=disk.path / "index", stage_heap_mb=16, writer_threads=1))
    index = target.create_version("shop", MAPPING)
    stage = target.open_stage(index, "p1.1.1")
    assert stage is not None
    assert stage.add([big_doc(i) for i in range(20)]) == []
    stage.seal()
    disk.fill()
    with pytest.raises(TransientError, match=r"No space left on device.*has room") as raised:
        target.adopt_stages(index, ["p1.1.1"])
    assert index in str(raised.value)
    assert target.count(index) == 0, "nothing is adopted until meta.json lists it"
    assert not list((disk.path / "index").rglob("*.tmp")), "a failed replace leaves no temporary file"
    disk.free()
    assert target.adopt_stages(index, ["p1.1.1"]) == 20
    assert target.count(index) == 20
    target.close()


def test_a_version_created_on_a_full_disk_is_transient_and_leaves_nothing(disk: SmallDisk) -> None:
    """Tantivy itself reports the full disk (a ValueError, "No space left on device") while it
    writes the new version's first files: a transient error naming the version, the half-made
    directory removed (its space given back), and a rerun once there is room creates it."""
    target = TantivyTarget(TantivyTargetConfig(root=disk.path / "index"))
    target.create_version("shop", MAPPING)  # the root and the alias's first version exist
    disk.fill()
    with pytest.raises(TransientError, match=r"shop_v2.*No space left on device.*has room"):
        target.create_version("shop", MAPPING)
    assert sorted(p.name for p in (disk.path / "index").iterdir() if p.name.startswith(".creating")) == []
    disk.free()
    assert target.create_version("shop", MAPPING) == "shop_v2"
    target.close()


FINISH_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
target = TantivyTarget(TantivyTargetConfig(root=Path(sys.argv[1])))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))  # files may grow to 16 bytes, no further
try:
    target.finish_version(sys.argv[2])
except OSError as exc:
    print("failed:", exc)
"""


def test_a_state_write_cut_short_leaves_the_old_state(tmp_path: Path) -> None:
    """A version's state file is read by every later run: written in place, a write the kernel
    cut short left it truncated, and every rerun stopped on a decoding error. Here the kernel
    cuts it at 16 bytes (a file-size limit: the one way to fail a write part-way on any disk),
    in a process of its own; the old state must stand, and a rerun finishes the version."""
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "index"))
    index = target.create_version("shop", MAPPING)
    state_file = tmp_path / "index" / index / "sparkindex-state.json"
    state = state_file.read_bytes()
    assert len(state) > 16
    done = subprocess.run(
        [sys.executable, "-c", FINISH_UNDER_A_FILE_SIZE_LIMIT, str(tmp_path / "index"), index],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "failed:" in done.stdout and "File too large" in done.stdout, done.stdout + done.stderr[-2000:]
    assert state_file.read_bytes() == state
    assert not list((tmp_path / "index").rglob("*.tmp"))
    target.finish_version(index)  # the rerun
    assert b'"ready"' in state_file.read_bytes()
    target.close()


def test_only_disk_errors_are_called_the_disk() -> None:
    """A permission or descriptor error is not a full disk: it passes through as it is, never as
    "rerun once the disk has room"."""
    import errno

    from sparkindex.targets.tantivy.errors import disk_errors_are_transient

    with pytest.raises(PermissionError), disk_errors_are_transient("index x"):
        raise PermissionError(errno.EACCES, "Permission denied")
    with pytest.raises(ValueError, match="schema"), disk_errors_are_transient("index x"):
        raise ValueError("a schema error")
    with pytest.raises(TransientError, match="disk is fixed"), disk_errors_are_transient("index x"):
        raise OSError(errno.EROFS, "Read-only file system")
    # Tantivy's own errors carry the errno in their message
    quota = "An IO error occurred: 'Disk quota exceeded (os error 122)'"
    with pytest.raises(TransientError, match="has room"), disk_errors_are_transient("index x"):
        raise ValueError(quota)
    with pytest.raises(TransientError, match="disk is fixed"), disk_errors_are_transient("index x"):
        raise ValueError("An IO error occurred: 'Read-only file system (os error 30)'")
    with pytest.raises(ValueError, match="os error 13"), disk_errors_are_transient("index x"):
        raise ValueError("An IO error occurred: 'Permission denied (os error 13)'")
