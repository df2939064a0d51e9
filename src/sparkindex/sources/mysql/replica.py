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

from sparkindex.sources.mysql.gtids import parse_gtids
from sparkindex.sources.replica import ReplicaLink, ReplicaStatus


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

    def follows_primary(self) -> bool | None:
        """The server id the replica's connection reports for its master is the primary's own."""
        with self.primary.connect("the primary's server id") as conn:
            server_id = conn.execute(sa.text("SELECT @@server_id")).scalar()
        with self.replica.connect("the replica's master") as conn:
            slave = self._slave_status(conn)
        master = None if slave is None else slave.get("Master_Server_Id")
        return None if not master else str(master) == str(server_id)

    def _slave_status(self, conn: sa.Connection) -> dict[str, Any] | None:
        """``SHOW SLAVE STATUS`` as a dict; None when the server replicates from nobody. Without
        the privilege to ask, the replica's own GTID position says whether it ever replicated."""
        try:
            row = conn.execute(sa.text("SHOW SLAVE STATUS")).mappings().first()
        except sa.exc.DBAPIError:
            pos = conn.execute(sa.text("SELECT @@gtid_slave_pos")).scalar()
            return {"Gtid_Slave_Pos": pos} if pos else None
        return None if row is None else dict(row)

    def status(self, position: str) -> ReplicaStatus:
        """Replicating or not; the replica's GTID position, transactions behind *position* per
        domain, whether its threads run, and ``Seconds_Behind_Master``."""
        with self.replica.connect("the replica's replication state") as conn:
            slave = self._slave_status(conn)
            replayed = str(conn.execute(sa.text("SELECT @@gtid_slave_pos")).scalar() or "")
        if slave is None:
            return ReplicaStatus(False, "", "replicates from no primary: current", 0.0)
        wanted, done = parse_gtids(position), parse_gtids(replayed)
        done_by_domain: dict[int, int] = {}
        for (domain, _server), seq in done.items():
            done_by_domain[domain] = max(seq, done_by_domain.get(domain, 0))
        behind = sum(max(0, seq - done_by_domain.get(domain, 0)) for (domain, _server), seq in wanted.items())
        if behind == 0:
            return ReplicaStatus(True, replayed, "caught up", 0.0)
        words = f"{behind} transactions behind"
        io, sql = slave.get("Slave_IO_Running"), slave.get("Slave_SQL_Running")
        if io is not None and (io, sql) != ("Yes", "Yes"):
            words += f", replication threads IO {io} / SQL {sql}"
            error = slave.get("Last_SQL_Error") or slave.get("Last_IO_Error")
            if error:
                words += f" ({str(error)[:200]})"
        seconds = slave.get("Seconds_Behind_Master")
        lag = None if seconds is None else float(seconds)
        if lag is not None:
            words += f", Seconds_Behind_Master {lag:g}"
        return ReplicaStatus(True, replayed or "nothing", words, lag)
