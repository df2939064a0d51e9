"""Every target is a context manager that gives back what it held: the process's file
descriptors (a search engine's kept-alive HTTP connections) and threads (a Tantivy index's
meta-file watcher, a native thread per open index) are as many after the block as before it,
and closing again does nothing more.

Both go a moment after the close, not at it: the search engines' servers (a proxy in front of
osmem) run in this process, and their end of a connection closes when they read the client's
close; Tantivy's watcher notices that its index was dropped on its next poll (every 500 ms). So
the counts are awaited. Left open, a connection or an index holds them for good, and the wait
fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.shop import wait_for
from tests.targets.backends import BACKENDS, Backend, make_backend
from tests.targets.test_conformance import MAPPING, load, nth


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from make_backend(request.param, request, tmp_path)


def held() -> tuple[int, int]:
    """The process's open file descriptors and OS threads."""
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))


def at_most(counts: tuple[int, int], limit: tuple[int, int]) -> bool:
    return all(n <= m for n, m in zip(counts, limit, strict=True))


def test_a_target_closes_what_it_opened_at_the_end_of_its_block(backend: Backend) -> None:
    before = held()
    with backend.open() as writer:  # the index to read
        index = writer.create_version("lifetime", MAPPING)
        load(writer, index, [nth(i) for i in range(5)])
        writer.finish_version(index)
    with backend.open() as target:
        assert target.count(index) == 5  # connects (a search engine) or opens the index (Tantivy)
        assert target.search(index, "*", 10)  # and reads through what it opened
        used = held()
    wait_for(lambda: at_most(held(), before), 5.0, f"(descriptors, threads) {before} as before ({used} in the block)")
    target.close()  # closing again does nothing more
    assert at_most(held(), before)
