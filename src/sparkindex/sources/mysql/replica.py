"""A MariaDB replica: GTID positions on both sides.

The primary's ``@@gtid_binlog_pos`` holds the last GTID of every replication domain it has
written; the replica has applied all of it once ``MASTER_GTID_WAIT`` says so (the server waits
itself, up to a timeout, so no poll is needed between the caller's slices). A replica that
filters what it applies (``replicate_wild_do_table``) still records the GTIDs it skipped, so the
wait ends for it too.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sparkindex.sources.base import Source
from sparkindex.sources.mysql.gtids import parse_gtids
from sparkindex.sources.replica import ReplicaLink, ReplicaStatus

#: ER_SPECIFIC_ACCESS_DENIED_ERROR: the user may not read the replication status
ACCESS_DENIED = 1227


def _error_code(exc: sa.exc.DBAPIError) -> int | None:
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class MariadbReplicaLink(ReplicaLink):
    def primary_position(self) -> str:
        with self.primary.connect("the primary's GTID position") as conn:
            return str(conn.execute(sa.text("SELECT @@gtid_binlog_pos")).scalar_one() or "")

    def reached(self, position: str, timeout_s: float) -> bool:
        if not position:
            return True  # the primary has written no GTID: nothing to replay
        with self.replica.connect("the replica's GTID wait") as conn:
            # 0: replayed; -1: timed out (NULL: the argument was not a GTID list)
            waited = conn.execute(
                sa.text("SELECT MASTER_GTID_WAIT(:pos, :timeout)"), {"pos": position, "timeout": max(0.0, timeout_s)}
            ).scalar()
        return waited == 0

    def _server_id(self, source: Source) -> str:
        with source.connect("the server id") as conn:
            return str(conn.execute(sa.text("SELECT @@server_id")).scalar())

    def follows_primary(self) -> bool | None:
        """The server id a replica connection reports for its master is the primary's own (any
        of its named connections: multi-source replication); None when it cannot be told."""
        server_id = self._server_id(self.primary)
        with self.replica.connect("the replica's master") as conn:
            slave = self._slave_status(conn)
        masters = [] if slave is None else [str(m) for m in slave.get("Master_Server_Ids", []) if m]
        return None if not masters else server_id in masters

    def is_primary(self) -> bool:
        """The same ``@@server_id`` (each server of a replication topology has its own)."""
        return self._server_id(self.primary) == self._server_id(self.replica)

    def _slave_status(self, conn: sa.Connection) -> dict[str, Any] | None:
        """``SHOW ALL SLAVES STATUS`` (every named connection) as one dict: the first row's
        values, its threads and errors those of any connection that is not running, and every
        connection's master id; None when the server replicates from nobody. Without the
        privilege to ask (error 1227), the server's GTID position says whether it ever
        replicated; any other error is raised."""
        try:
            rows = [dict(r) for r in conn.execute(sa.text("SHOW ALL SLAVES STATUS")).mappings()]
        except sa.exc.DBAPIError as exc:
            if _error_code(exc) != ACCESS_DENIED:
                raise
            pos = conn.execute(sa.text("SELECT @@gtid_slave_pos")).scalar()
            return {"Gtid_Slave_Pos": pos} if pos else None
        if not rows:
            return None
        broken = [r for r in rows if (r.get("Slave_IO_Running"), r.get("Slave_SQL_Running")) != ("Yes", "Yes")]
        out = dict(broken[0] if broken else rows[0])
        out["Master_Server_Ids"] = [r.get("Master_Server_Id") for r in rows]
        lags: list[Any] = [r.get("Seconds_Behind_Master") for r in rows]
        out["Seconds_Behind_Master"] = None if None in lags else max(int(lag) for lag in lags)
        return out

    def status(self, position: str) -> ReplicaStatus:
        """Replicating or not; the replica's GTID position, transactions behind *position* per
        domain, whether its threads run, and ``Seconds_Behind_Master``."""
        with self.replica.connect("the replica's replication state") as conn:
            slave = self._slave_status(conn)
            replayed = str(conn.execute(sa.text("SELECT @@gtid_slave_pos")).scalar() or "")
        if slave is None:
            return ReplicaStatus(False, "", "replicates from no primary: current", 0.0)
        stalled = ""
        io, sql = slave.get("Slave_IO_Running"), slave.get("Slave_SQL_Running")
        if io is not None and (io, sql) != ("Yes", "Yes"):
            stalled = f"replication threads IO {io} / SQL {sql}"
            error = slave.get("Last_SQL_Error") or slave.get("Last_IO_Error")
            if error:
                stalled += f" ({str(error)[:200]})"
        wanted, done = parse_gtids(position), parse_gtids(replayed)
        done_by_domain: dict[int, int] = {}
        for (domain, _server), seq in done.items():
            done_by_domain[domain] = max(seq, done_by_domain.get(domain, 0))
        behind = sum(max(0, seq - done_by_domain.get(domain, 0)) for (domain, _server), seq in wanted.items())
        if behind == 0:
            return ReplicaStatus(True, replayed, "caught up" + (f", {stalled}" if stalled else ""), 0.0, stalled)
        words = f"{behind} transactions behind" + (f", {stalled}" if stalled else "")
        seconds = slave.get("Seconds_Behind_Master")
        lag = None if seconds is None else float(seconds)
        if lag is not None:
            words += f", Seconds_Behind_Master {lag:g}"
        return ReplicaStatus(True, replayed or "nothing", words, lag, stalled)
