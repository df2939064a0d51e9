"""A PostgreSQL streaming replica: WAL positions (LSNs) on both sides.

The primary's position (:meth:`PostgresReplicaLink.primary_position`) is past everything it had
committed when asked; the replica has applied all of it once ``pg_last_wal_replay_lsn()`` is at or past it. PostgreSQL
has no server-side wait for an LSN before version 18, so :meth:`reached` polls (the caller backs
off between polls).
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from sparkindex.sources.replica import ReplicaLink, ReplicaStatus


class PostgresReplicaLink(ReplicaLink):
    def primary_position(self) -> str:
        """A WAL position at or past every commit the primary had made when asked, that a
        replica can reach. Its insert position covers a commit made with ``synchronous_commit =
        off`` (visible, maybe before P0, while its WAL is not yet written), but the WAL after the
        last commit may stay unflushed, never sent to a replica, for as long as nothing commits.
        So: the insert position once the primary has flushed that far; else, once the WAL writer
        has had time to flush every asynchronous commit (three ``wal_writer_delay``), the flush
        position then reached, which is past them all."""
        with self.primary.connect("the primary's WAL position") as conn:
            inserted, delay_ms = conn.execute(
                sa.text("SELECT pg_current_wal_insert_lsn()::text, current_setting('wal_writer_delay')::interval")
            ).one()
            deadline = time.monotonic() + 3 * delay_ms.total_seconds() + 0.1
            while True:
                flushed, done = conn.execute(
                    sa.text(
                        "SELECT pg_current_wal_flush_lsn()::text, pg_current_wal_flush_lsn() >= CAST(:i AS pg_lsn)"
                    ),
                    {"i": inserted},
                ).one()
                if done:
                    return str(inserted)
                if time.monotonic() >= deadline:
                    return str(flushed)
                conn.rollback()  # a fresh snapshot of the positions each time
                time.sleep(0.02)

    def follows_primary(self) -> bool | None:
        """A streaming replica is a copy of its primary's cluster: the same system identifier."""
        query = sa.text("SELECT system_identifier FROM pg_control_system()")
        with self.primary.connect("the primary's system identifier") as conn:
            primary = conn.execute(query).scalar_one()
        with self.replica.connect("the replica's system identifier") as conn:
            replica = conn.execute(query).scalar_one()
        return bool(primary == replica)

    def is_primary(self) -> bool:
        """The primary's own cluster, not in recovery. (A promoted copy has the same identifier:
        it is told apart by the position it has not reached, which the caller asked first.)"""
        query = sa.text("SELECT system_identifier, pg_is_in_recovery() FROM pg_control_system()")
        with self.primary.connect("the primary's system identifier") as conn:
            primary = conn.execute(query).one()[0]
        with self.replica.connect("the read server's system identifier") as conn:
            replica, in_recovery = conn.execute(query).one()
        return bool(primary == replica and not in_recovery)

    def _replayed(self, position: str) -> bool:
        with self.replica.connect("the replica's replayed WAL position") as conn:
            done = conn.execute(
                sa.text("SELECT coalesce(pg_last_wal_replay_lsn() >= CAST(:lsn AS pg_lsn), false)"), {"lsn": position}
            ).scalar_one()
        return bool(done)

    def reached(self, position: str, timeout_s: float) -> bool:
        if self._replayed(position):
            return True
        if timeout_s <= 0:
            return False
        time.sleep(timeout_s)  # a poll's backoff: PostgreSQL cannot wait for an LSN itself
        return self._replayed(position)

    def status(self, position: str) -> ReplicaStatus:
        """In recovery or not; replayed LSN, bytes of WAL behind *position*, whether replay is
        paused, and the age of the last replayed transaction (the lag, while behind)."""
        query = sa.text(
            "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,"
            " pg_wal_lsn_diff(CAST(:lsn AS pg_lsn), pg_last_wal_replay_lsn()),"
            " CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END,"
            " extract(epoch FROM now() - pg_last_xact_replay_timestamp())"
        )
        with self.replica.connect("the replica's recovery state") as conn:
            in_recovery, replayed, diff, paused, age = conn.execute(query, {"lsn": position}).one()
        if not in_recovery:
            return ReplicaStatus(False, "", "not in recovery: a primary, current", 0.0)
        stalled = "replay paused (pg_wal_replay_resume() resumes it)" if paused else ""
        behind_bytes = max(0, int(diff or 0))
        if behind_bytes == 0 and replayed is not None:
            # nothing to replay: current however old its last transaction is (a quiet primary)
            return ReplicaStatus(True, replayed, "caught up" + (f", {stalled}" if stalled else ""), 0.0, stalled)
        words = f"{behind_bytes} bytes of WAL behind" + (f", {stalled}" if stalled else "")
        lag = None if age is None else max(0.0, float(age))
        if lag is not None:
            words += f", last replayed transaction {lag:.1f}s old"
        return ReplicaStatus(True, replayed or "nothing", words, lag, stalled)
