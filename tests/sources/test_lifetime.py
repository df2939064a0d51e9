"""Every database source is a context manager that gives its connections back at the end of its
block (a SQLite file's descriptor, a server's socket), and closing again does nothing more."""

from __future__ import annotations

import os

from sparkindex.sources.registry import open_database
from tests.sources.conftest import LoadedDatabase


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_source_closes_its_connections_at_the_end_of_its_block(loaded_database: LoadedDatabase) -> None:
    before = open_fds()
    with open_database(loaded_database.url) as source:
        assert source.count(source.table("products")) > 0  # a connection, kept by the pool
        used = open_fds()
    assert used > before, "the test must see the connection it expects to be closed"
    assert open_fds() == before, f"{before} descriptors before the block, {used} in it, {open_fds()} after"
    source.close()  # closing again does nothing more
    assert open_fds() == before
