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
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pymysql
import sqlalchemy as sa
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from sparkindex.changes.model import Batch, Change
from sparkindex.changes.source import ChangeSource, Lag
from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError, TransientError

log = logging.getLogger(__name__)

REQUIRED = {
    "log_bin": ("ON", "start the server with log_bin"),
    "binlog_format": ("ROW", "SET GLOBAL binlog_format = ROW"),
    "binlog_row_image": ("FULL", "SET GLOBAL binlog_row_image = FULL"),
    "binlog_row_metadata": ("FULL", "SET GLOBAL binlog_row_metadata = FULL"),
}
ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
EVENTS = [MariadbGtidEvent, XidEvent, QueryEvent, *ROW_EVENTS]
#: Seconds of silence after which the server sends a heartbeat (how a read knows it is at the end).
HEARTBEAT_S = 0.2
#: A read returns at the next transaction boundary after this long, even while others write.
READ_BUDGET_S = 0.5


def gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1]) if gtid else 0


class MysqlChangeSource(ChangeSource):
    exact_positions = True  # GTID sequences: nothing commits below one already read

    def __init__(self, *args: Any, **kwargs: Any) -> None:
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
    def _cursor(self, what: str) -> Iterator[Any]:
        try:
            conn = pymysql.connect(**self.settings, autocommit=True, connect_timeout=10)
        except pymysql.MySQLError as exc:
            raise TransientError(f"source {redact_url(self.source.url)}: {what}: {exc}") from None
        try:
            with conn.cursor() as cur:
                yield cur
        except pymysql.OperationalError as exc:
            raise TransientError(f"source {redact_url(self.source.url)}: {what}: {exc}") from None
        finally:
            conn.close()

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
        for table in self.tables:
            info = self.source.table(table.name, table.where)
            if not info.primary_key and not info.unique_keys:
                raise ConfigError(
                    f"{table.where}: table {table.name!r} has no primary key; its changes cannot be told apart. "
                    "Add a primary key"
                )

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
            raise TransientError(f"source {redact_url(self.source.url)}: reading the binlog: {exc}") from None
        if current:  # stopped inside a transaction: read it again from its start next time
            self.close()
        self._at = done_gtid
        seq = gtid_seq(done_gtid)
        short = {"incomplete": seq < target}  # stopped before the end (time budget, batch limit)
        if done_gtid == gtid:
            return Batch([], dict(start), self.position(start), extra=short)
        return Batch(changes, {"gtid": done_gtid, "seq": seq}, seq, ts, more=len(changes) >= limit, extra=short)

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


_NAME = r"(`(?:[^`]|``)+`|[\w$]+)"
_COMMENTS = re.compile(r"(?:\s+|/\*.*?\*/|#[^\n]*(?:\n|$)|--\s[^\n]*(?:\n|$))*", re.DOTALL)
_TRUNCATE = re.compile(
    rf"truncate\s+(?:table\s+)?(?:{_NAME}\s*\.\s*)?{_NAME}(?:\s+(?:wait\s+\d+|nowait))?\s*;?\s*", re.IGNORECASE
)


def truncated_table(query: str, database: str, schema: bytes | str | None) -> str | None:
    """The table a ``TRUNCATE`` statement of the binlog empties, if it is one of *database*'s
    (*schema*: the statement's default database), as the statement spells it. Row-based logging
    still logs it as a statement. One that cannot be read is logged, never silently passed over."""
    head = _COMMENTS.match(query)
    body = query[head.end() :] if head else query
    if body[:8].lower() != "truncate":
        return None
    m = _TRUNCATE.fullmatch(body)
    if m is None:
        log.warning("a TRUNCATE in the binlog was not understood; its documents may be stale: %.200s", body)
        return None
    default = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else (schema or "")
    db = _unquote(m.group(1)) if m.group(1) else default
    return _unquote(m.group(2)) if db.lower() == database.lower() else None


def _watched(table: str | None, names: set[str]) -> str | None:
    """*table* as the pipeline names it, if watched (names may differ in case only where the
    server folds them, ``lower_case_table_names``)."""
    if table is None or table in names:
        return table
    folded = [n for n in names if n.lower() == table.lower()]
    return folded[0] if len(folded) == 1 else None


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name
