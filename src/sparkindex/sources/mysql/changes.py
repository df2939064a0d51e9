"""MariaDB change capture: the binlog, read with mysql-replication (pymysqlreplication), by GTID.

On MariaDB the library ignores ``log_file``/``log_pos`` unless it connects by GTID
(``auto_position``), so offsets are GTIDs: ``{"gtid": "0-1-812", "seq": 812}``, the last whole
transaction read. A read connects with the offset as the replica's GTID state, takes events
until the end of the binlog (non-blocking) or the batch is full, and stops only at transaction
boundaries (an XID event or a COMMIT): a batch never ends inside a transaction, so a resumed
sync never applies half of one. The GTID's sequence number is the position (monotone within the
GTID domain; servers writing several domains are refused).

Row images carry column names only with ``binlog_row_metadata = FULL`` and every column only with
``binlog_row_image = FULL``; :meth:`MysqlChangeSource.check` refuses a server without them, naming
the setting. The values are used only to find documents, which are rebuilt from the rows.

Continuity (docs/change-capture.md, gaps): a stored GTID is served only while the binlog still holds
every transaction after it. :meth:`MysqlChangeSource.continuity` proves it from what the server
says cheaply (``@@gtid_binlog_state``, ``SHOW BINARY LOGS`` and the ``Gtid_list`` at the head of
the oldest binlog file, the GTIDs written before it); a read the server refuses with error 1236
(GTID purged, or not in its binlog) raises :class:`LogGap`, never a retried transient error.

Errors are classified where they arise: only what comes and goes with the connection or the
server's load is a :class:`TransientError`; a missing privilege, a refused login or a binlog
switched off are :class:`ConfigError` saying what to change; anything else the server refuses is
a :class:`PermanentError`, since it would refuse it again.
"""

from __future__ import annotations

import contextlib
import logging
import random
import struct
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError, LogGap, PermanentError, SparkIndexError, TransientError
from sparkindex.extras import missing_extra
from sparkindex.sources.change_model import Batch, Change
from sparkindex.sources.change_source import ChangeSource, Gap, Lag
from sparkindex.sources.mysql.binlog_settings import GRANTS, REQUIRED
from sparkindex.sources.mysql.gtids import format_gtids, gtid_seq, parse_gtids
from sparkindex.sources.mysql.server_errors import (
    ER_ERROR_WHEN_EXECUTING_COMMAND,
    ER_HOST_IS_BLOCKED,
    ER_MASTER_FATAL_ERROR_READING_BINLOG,
    ER_NO_BINARY_LOGGING,
    LOGIN_CODES,
    PRIVILEGE_CODES,
    TRANSIENT_CODES,
    error_code,
    error_text,
    gtid_gone,
)
from sparkindex.sources.mysql.statements import truncated_table

# The mysql extra: mysql-replication, and PyMySQL for its connection. Without it this module still
# imports (the registry names it whatever the install); making a change source fails.
_MISSING: ImportError | None = None
try:
    import pymysql
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
except ImportError as exc:
    _MISSING = exc
else:
    ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
    EVENTS = [MariadbGtidEvent, XidEvent, QueryEvent, *ROW_EVENTS]

log = logging.getLogger(__name__)

#: Seconds of silence after which the server sends a heartbeat (how a read knows it is at the end).
HEARTBEAT_S = 0.2
#: A read returns at the next transaction boundary after this long, even while others write.
READ_BUDGET_S = 0.5


COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01


class MysqlChangeSource(ChangeSource):
    exact_positions = True  # GTID sequences: nothing commits below one already read

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if _MISSING is not None:
            raise missing_extra("mysql", "MySQL/MariaDB change capture (the binlog)", _MISSING)
        super().__init__(*args, **kwargs)
        self._stream: BinLogStreamReader | None = None
        self._at = ""
        self._held: Any = None
        url = sa.make_url(self.source.url)
        self.database = str(url.database or "")
        self.settings: dict[str, Any] = {
            "host": url.host or "127.0.0.1",
            "port": int(url.port or 3306),
            "user": url.username or "root",
            "password": url.password or "",
        }

    @contextmanager
    def _connection(self, what: str) -> Iterator[Any]:
        """A new connection for one short task (checks, positions); every driver error leaves as
        one of ours, classified (:meth:`_error`)."""
        try:
            conn = pymysql.connect(**self.settings, autocommit=True, connect_timeout=10)
        except (pymysql.MySQLError, OSError) as exc:
            raise self._error(exc, what) from None
        try:
            yield conn
        except (pymysql.MySQLError, OSError) as exc:
            raise self._error(exc, what) from None
        finally:
            with contextlib.suppress(pymysql.MySQLError, OSError):  # closing a connection that already failed
                conn.close()

    @contextmanager
    def _cursor(self, what: str) -> Iterator[Any]:
        with self._connection(what) as conn, conn.cursor() as cur:
            yield cur

    def _error(self, exc: BaseException, what: str) -> SparkIndexError:
        """What a driver error means for the caller. Only connection-level failures are retried;
        what the server refuses now it refuses again, so it says how to fix it instead."""
        where = f"source {redact_url(self.source.url)}: {what}"
        code, text = error_code(exc), error_text(exc)
        user = self.settings["user"]
        if isinstance(exc, OSError) or code is None or code == 0 or 2000 <= code < 3000 or code in TRANSIENT_CODES:
            return TransientError(f"{where}: {text}")
        if code in PRIVILEGE_CODES:
            return ConfigError(
                f"{where}: {text}. Binlog change capture reads the binlog as a replica does: "
                f"GRANT {GRANTS} ON *.* TO '{user}'@'<host>' (REPLICATION CLIENT for BINLOG MONITOR before "
                "MariaDB 10.5), besides SELECT on the source tables"
            )
        if code in LOGIN_CODES:
            return ConfigError(f"{where}: {text}. Check source.url's user and password, and the account's host")
        if code == ER_HOST_IS_BLOCKED:
            return PermanentError(f"{where}: {text}. Unblock it with `mariadb-admin flush-hosts` (FLUSH HOSTS)")
        if code == ER_NO_BINARY_LOGGING or (code == ER_MASTER_FATAL_ERROR_READING_BINLOG and "not open" in text):
            return ConfigError(f"{where}: {text}. Start the server with log_bin (binlog change capture needs it)")
        if code == ER_MASTER_FATAL_ERROR_READING_BINLOG and "max_allowed_packet" in text:
            return ConfigError(f"{where}: {text}. Raise max_allowed_packet on the server above the largest event")
        return PermanentError(f"{where}: {text}")

    # -- checks ------------------------------------------------------------------------------------
    def check(self) -> None:
        with self._cursor("checking the binlog settings") as cur:
            cur.execute("SELECT VERSION()")
            version = str(cur.fetchone()[0])
            names = ", ".join(f"'{n}'" for n in REQUIRED)
            cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
            found = {str(k).lower(): str(v).upper() for k, v in cur.fetchall()}
            cur.execute("SELECT @@gtid_binlog_pos")
            pos = str(cur.fetchone()[0] or "")
        if "MARIADB" not in version.upper():
            raise ConfigError(
                f"source.url: binlog change capture resumes by MariaDB GTID; {version} is MySQL. "
                "Use sync.source: polling with indexes[].changes"
            )
        for name, (wanted, how) in REQUIRED.items():
            if found.get(name) != wanted:
                raise ConfigError(
                    f"source.url: the server has {name} = {found.get(name, 'unset')}; binlog change capture needs "
                    f"{name} = {wanted} ({how}, and in the server's configuration so that it survives a restart)"
                )
        if "," in pos:
            raise ConfigError(
                f"source.url: the binlog holds several GTID domains ({pos}); change capture orders changes within "
                "one domain only"
            )
        self._check_privileges()
        for table in self.tables:
            info = self.source.table(table.name, table.where)
            if not info.primary_key and not info.unique_keys:
                raise ConfigError(
                    f"{table.where}: table {table.name!r} has no primary key; its changes cannot be told apart. "
                    "Add a primary key"
                )

    def _check_privileges(self) -> None:
        """Refuse an account that cannot read the binlog now, not in the middle of the stream
        (where a refusal would fail the query over and over until the restarts give up).
        BINLOG MONITOR: ``SHOW BINARY LOGS``. REPLICATION SLAVE: a binlog dump asked from the end
        of the newest file, non-blocking (the server checks the privilege first, then has nothing
        to send), as server id 0 (which never displaces another reader's dump)."""
        what = f"checking that {self.settings['user']!r} may read the binlog"
        with self._connection(what) as conn:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                rows = cur.fetchall()
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum, @mariadb_slave_capability = 4")
            if not rows:
                return
            name, size = str(rows[-1][0]), int(rows[-1][1])
            payload = struct.pack("<IHI", size, BINLOG_DUMP_NON_BLOCK, 0) + name.encode()
            try:
                conn._execute_command(COM_BINLOG_DUMP, payload)
                for _ in range(16):  # a rotate, the format description, then the end
                    if conn._read_packet().is_eof_packet():
                        break
            except pymysql.MySQLError as exc:
                if error_code(exc) != ER_MASTER_FATAL_ERROR_READING_BINLOG:
                    raise  # 1236: the file rotated away meanwhile, but the privilege was granted
                log.debug("privilege probe: %s", error_text(exc))

    # -- continuity --------------------------------------------------------------------------------
    def continuity(self, offset: Mapping[str, Any]) -> Gap | None:
        """Whether the binlog still holds every transaction after the stored GTID ``D-S-N``:

        * domain D is the server's, and its binlog state has reached N (a binlog behind it is a
          server restored from a backup, ``RESET MASTER``, or another server);
        * server S wrote domain D up to N here: the state keeps the last GTID of every
          originating server, so a failover to a replica that logs what it replicated
          (``log_slave_updates``) keeps the old primary's entry and is no gap, while a server of
          another history is (the test the server itself applies to a replica's GTID state);
        * the oldest binlog file starts at or before N: its ``Gtid_list`` event names the last
          GTIDs written before it; above N, the files after the stored GTID were purged.

        ``@@server_id`` is not compared: GTIDs already name their originating server, and a
        failover legitimately changes the server we talk to. MariaDB has no identity of a binlog
        history beyond that, so two unrelated servers with the same domain and server id, the
        second ahead of the stored GTID, cannot be told apart (a read from there would find the
        GTID too). An empty stored GTID (before any transaction) is a gap only once something
        was purged. One connection, three cheap statements: asked at every start, not per batch."""
        gtid = str(offset.get("gtid", ""))
        stored = self.position(offset)
        with self._cursor(f"checking that the binlog still holds GTID {gtid or '(none)'}") as cur:
            cur.execute("SELECT @@gtid_binlog_state")
            row = cur.fetchone()
            state = parse_gtids(str(row[0] or "") if row else "")
            oldest, before = self._oldest_binlog(cur)
        gone = "what committed after it is gone from the log"
        if not gtid:
            if not before:
                return None
            return Gap(
                f"the stored offset is from before the binlog's first transaction, but binlogs were purged: the oldest "
                f"file {oldest} starts after GTID(s) {format_gtids(before)}; {gone}",
                stored,
                max(before.values()),
            )
        domain, server, seq = (int(x) for x in gtid.split("-"))
        mine = {s: n for (d, s), n in state.items() if d == domain}
        first = None if before is None else max((n for (d, _), n in before.items() if d == domain), default=0)
        if not mine:
            return Gap(
                f"the stored GTID {gtid} is of domain {domain}, which the server's binlog does not have (its GTID "
                f"state is {format_gtids(state) or 'empty'}): a different server, or RESET MASTER; {gone}",
                stored,
            )
        if max(mine.values()) < seq:
            return Gap(
                f"the server's binlog ends at GTID {format_gtids({(domain, s): n for s, n in mine.items()})}, "
                "before the "
                f"stored GTID {gtid}: a server restored from a backup, RESET MASTER, or a different server",
                stored,
                first,
            )
        if mine.get(server, -1) < seq:
            return Gap(
                f"the stored GTID {gtid} names server {server}, but this binlog holds domain {domain} only as "
                f"{format_gtids({(domain, s): n for s, n in mine.items()})}: a different server, or a failover to "
                "a replica "
                f"that did not log what it replicated (log_slave_updates); {gone}",
                stored,
                first,
            )
        if before is not None and first is not None and first > seq:
            return Gap(
                f"binlogs purged past the stored GTID {gtid}: the oldest binlog file {oldest} starts after GTID "
                f"{format_gtids({k: n for k, n in before.items() if k[0] == domain})} (PURGE BINARY LOGS, "
                f"expire_logs_days or binlog_expire_logs_seconds): transactions {seq + 1} to {first} of domain "
                f"{domain} are gone from the log",
                stored,
                first,
            )
        return None

    @staticmethod
    def _oldest_binlog(cur: Any) -> tuple[str, dict[tuple[int, int], int] | None]:
        """The oldest binlog file and the GTIDs written before it (its ``Gtid_list`` event, the
        second or third event of every file: reading it costs a few hundred bytes); None when the
        file has none (not written by MariaDB 10.0+)."""
        for _ in range(5):
            cur.execute("SHOW BINARY LOGS")
            rows = cur.fetchall()
            if not rows:
                raise ConfigError("source.url: the server keeps no binlog; start it with log_bin")
            oldest = str(rows[0][0])
            try:
                cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 4", (oldest,))
            except pymysql.MySQLError as exc:
                if error_code(exc) == ER_ERROR_WHEN_EXECUTING_COMMAND:
                    continue  # purged between the two statements: look again
                raise
            for event in cur.fetchall():
                if str(event[2]) == "Gtid_list":
                    return oldest, parse_gtids(str(event[5]))
            log.warning("binlog %s has no Gtid_list event: purges before it cannot be detected", oldest)
            return oldest, None
        raise TransientError("the oldest binlog file kept being purged while it was looked at")

    # -- positions ---------------------------------------------------------------------------------
    def position(self, offset: Mapping[str, Any]) -> int:
        return int(offset.get("seq", 0))

    def head(self) -> dict[str, Any]:
        with self._cursor("reading the binlog position") as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            gtid = str(cur.fetchone()[0] or "")
        return {"gtid": gtid, "seq": gtid_seq(gtid)}

    def start(self) -> dict[str, Any]:
        return self.head()

    def lag(self, offset: Mapping[str, Any]) -> Lag:
        oldest = self.oldest_pending(offset)
        seconds = max(0.0, time.time() - oldest.ts) if oldest is not None else 0.0
        return Lag(None, seconds)

    # -- reading -----------------------------------------------------------------------------------
    def _open(self, gtid: str) -> None:
        """A blocking stream from *gtid*, kept open across reads: MariaDB 10.11 finds a GTID by
        scanning its binlog file from the start, so reconnecting for every batch would cost a scan
        each. Heartbeats (every HEARTBEAT_S of silence) tell a read that it reached the end."""
        self.close()
        self._stream = BinLogStreamReader(
            connection_settings=self.settings,
            server_id=self.pipeline.sync.server_id + random.randrange(1, 1 << 20),
            blocking=True,
            resume_stream=True,
            auto_position=gtid or None,
            is_mariadb=True,
            slave_heartbeat=HEARTBEAT_S,
            only_events=[*EVENTS, HeartbeatLogEvent],
            only_schemas=[self.database],
            only_tables=sorted({t.name for t in self.tables}),
        )
        self._at = gtid
        self._held = None  # an event read but not yet used (the next transaction's GTID)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def _events(self) -> Iterator[Any]:
        assert self._stream is not None
        if self._held is not None:
            held, self._held = self._held, None
            yield held
        yield from self._stream

    def read(self, start: Mapping[str, Any], limit: int, until: Mapping[str, Any] | None = None) -> Batch:
        """Whole transactions after *start*, up to the binlog's end as it was when the read began
        (or *until*): the end is known from ``@@gtid_binlog_pos``, not guessed from a silence."""
        gtid = str(start.get("gtid", ""))
        target = self.position(self.head())
        if until is not None:
            target = min(target, self.position(until))
        if gtid_seq(gtid) >= target:
            return Batch([], dict(start), self.position(start))
        if self._stream is None or self._at != gtid:
            self._open(gtid)
        names = {t.name for t in self.tables}
        changes: list[Change] = []
        txn: list[Change] = []
        current, done_gtid, ts = "", gtid, 0.0
        budget = time.monotonic() + READ_BUDGET_S
        try:
            for event in self._events():
                if isinstance(event, HeartbeatLogEvent):
                    if not current and time.monotonic() > budget:
                        break  # the server is slow to find the position; the next read goes on
                    continue
                if isinstance(event, MariadbGtidEvent):
                    if (current and not txn) or gtid_seq(event.gtid) > target or len(changes) >= limit:
                        self._held = event
                        break
                    current, txn, ts = event.gtid, [], float(event.timestamp)
                elif isinstance(event, XidEvent) or (isinstance(event, QueryEvent) and event.query != "BEGIN"):
                    if current and (isinstance(event, XidEvent) or event.query == "COMMIT" or not txn):
                        if isinstance(event, QueryEvent):  # a statement on its own (DDL)
                            table = _watched(truncated_table(event.query, self.database, event.schema), names)
                            if table is not None:
                                txn.append(Change(table, "truncate", gtid_seq(current), ts=ts))
                        changes.extend(txn)  # a COMMIT, or a statement on its own (DDL)
                        done_gtid, txn, current = current, [], ""
                        if gtid_seq(done_gtid) >= target or time.monotonic() > budget:
                            break
                elif current and isinstance(event, ROW_EVENTS) and event.table in names:
                    txn.extend(self._changes(event, gtid_seq(current), ts))
        except (pymysql.MySQLError, OSError) as exc:
            self.close()
            if gtid_gone(exc):
                raise self._gap(start, exc) from None
            raise self._error(exc, f"reading the binlog from GTID {gtid or '(start)'}") from None
        if current:  # stopped inside a transaction: read it again from its start next time
            self.close()
        self._at = done_gtid
        seq = gtid_seq(done_gtid)
        short = {"incomplete": seq < target}  # stopped before the end (time budget, batch limit)
        if done_gtid == gtid:
            return Batch([], dict(start), self.position(start), extra=short)
        return Batch(changes, {"gtid": done_gtid, "seq": seq}, seq, ts, more=len(changes) >= limit, extra=short)

    def _gap(self, start: Mapping[str, Any], exc: BaseException) -> LogGap:
        """The server cannot send the binlog from *start*: why, in the words of :meth:`continuity`
        where it can say (and where the log starts now), else in the server's."""
        gtid = str(start.get("gtid", ""))
        gap: Gap | None = None
        with contextlib.suppress(SparkIndexError):
            gap = self.continuity(start)
        cannot = f"the server cannot send the binlog from GTID {gtid}: {error_text(exc)}"
        reason = gap.reason if gap is not None else cannot
        return LogGap(
            f"source {redact_url(self.source.url)}: reading the binlog from GTID {gtid or '(start)'}: {reason}",
            stored=self.position(start),
            available=gap.available if gap is not None else None,
        )

    @staticmethod
    def _changes(event: Any, position: int, ts: float) -> list[Change]:
        out: list[Change] = []
        for row in event.rows:
            if isinstance(event, WriteRowsEvent):
                out.append(Change(event.table, "insert", position, None, dict(row["values"]), ts))
            elif isinstance(event, UpdateRowsEvent):
                out.append(
                    Change(event.table, "update", position, dict(row["before_values"]), dict(row["after_values"]), ts)
                )
            else:
                out.append(Change(event.table, "delete", position, dict(row["values"]), None, ts))
        return out


def _watched(table: str | None, names: set[str]) -> str | None:
    """*table* as the pipeline names it, if watched (names may differ in case only where the
    server folds them, ``lower_case_table_names``)."""
    if table is None or table in names:
        return table
    folded = [n for n in names if n.lower() == table.lower()]
    return folded[0] if len(folded) == 1 else None
