"""Holding a real run part-way for the live-view tests: a lock on the shop's SQLite file that the
test takes and lets go by condition, and the run's state as the coordination store has it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sparkindex.coordination.store import CoordinationStore

ENDED = ("COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "STOPPED")


class SourceGate:
    """An exclusive lock on the shop's SQLite file, taken and let go by the test, so that a run
    stays part-way until the test has seen it there, however fast the machine. The job's reads
    wait behind it (the SQLite source sets its busy timeout to the 600 s statement timeout: a
    reader waits for a writer rather than fail); what a worker has read already it still writes,
    and its next read waits with its partition claimed. The test lets go when it has seen the state
    it waits for (a condition, not a sleep); a run is never held for longer than a few ticks."""

    def __init__(self, db: Path) -> None:
        self._conn = sqlite3.connect(db, timeout=60, isolation_level=None)
        mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
        # in WAL mode readers never wait for a writer: the gate would hold nothing, silently
        assert mode != "wal", f"{db}: journal_mode {mode}: an exclusive lock would not stop readers"
        self.held = False

    def hold(self) -> None:
        assert not self.held
        self._conn.execute("BEGIN EXCLUSIVE")  # waits for the reads under way; new reads wait behind it
        self.held = True

    def release(self) -> None:
        if self.held:
            self._conn.execute("ROLLBACK")
            self.held = False

    def close(self) -> None:
        self.release()
        self._conn.close()


def in_store(store: CoordinationStore) -> tuple[str | None, int, dict[str, int]]:
    """The newest products job as the store has it now: status, processed, partitions by state."""
    jobs = store.job_rows.jobs(["products"])
    if not jobs:
        return None, 0, {}
    partitions: dict[str, int] = {}
    stats = store.partition_stats.stats(jobs[0].id).values()
    for s in stats:
        for state, n in s.partitions.items():
            partitions[state] = partitions.get(state, 0) + n
    return str(jobs[0].status), sum(s.processed for s in stats), partitions
