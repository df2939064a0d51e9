"""PostgreSQL change capture: a logical replication slot read with wal2json (format-version 2)
through the SQL slot functions.

Chosen over psycopg2's streaming ``LogicalReplicationConnection`` by measurement
(``bench/sync.py``, ``pg_decoding``: 200,000 row changes decoded at 98k-124k rows/s through peek
and advance, 43k-73k rows/s read message by message from the stream, on this 2-core machine under
load), and because it fits: a Structured Streaming batch is planned, applied, then acknowledged, which is exactly
``pg_logical_slot_peek_changes`` (read without consuming), the sink, then
``pg_replication_slot_advance`` (consume). Nothing is consumed before the target acknowledged it,
a crash simply peeks the same transactions again, and any connection can do it (no replication
protocol, no feedback timer that confirms on its own every 10 s).

Offsets are commit positions: ``{"lsn": N}`` where N is the end of the last included commit
record (the ``lsn`` column of a wal2json ``C`` row). Decoding skips transactions whose commit
record starts before the slot's confirmed position, and a peek returns whole transactions in
commit order, so advancing to that end never skips a transaction that was not returned.

The values in the log are used only to find documents (TOASTed columns missing from an UPDATE
do not matter: documents are rebuilt from the rows). Deletes carry the replica identity only; a
table whose deletes must reveal a foreign key to find their document needs REPLICA IDENTITY FULL
(:meth:`PostgresChangeSource.check` says so, naming the table and the columns).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError, LogGap, PermanentError, TransientError
from sparkindex.sources.change_model import Batch
from sparkindex.sources.change_source import ChangeSource, Gap, Lag
from sparkindex.sources.postgres.slots import legacy_slot_name, lsn_int, lsn_text, slot_name
from sparkindex.sources.postgres.wal2json import add_tables, parse_rows

log = logging.getLogger(__name__)

PLUGIN = "wal2json"


class PostgresChangeSource(ChangeSource):
    """The slot of one consumer (a sync's consumer group, a reindex's catch-up)."""

    head_is_resumable = True  # the head is a WAL insert position: commits before it end at or before it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        url = sa.make_url(self.source.url).set(drivername="postgresql")
        self.database = str(url.database or "")
        self.slot = slot_name(self.pipeline.sync.slot, self.database, self.pipeline.slot_namespace(), self.consumer)
        self.legacy_slot = legacy_slot_name(self.pipeline.sync.slot, self.consumer)
        self._dsn = url.render_as_string(hide_password=False)
        self._conn: psycopg.Connection[Any] | None = None
        self._names: dict[tuple[str, str], str] | None = None

    # -- connection --------------------------------------------------------------------------------
    @contextmanager
    def _cursor(self, what: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor on the kept connection; a lost connection is dropped and reported as transient,
        so the next call reconnects (a server restart is survived by the caller's retry)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10)
            with self._conn.cursor() as cur:
                yield cur
        except psycopg.errors.ObjectInUse as exc:  # the slot is being read by another session
            raise TransientError(f"slot {self.slot!r}: {what}: {_first_line(exc)}") from None
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            # psycopg files these under OperationalError, but they repeat: a slot invalidated
            # (max_slot_wal_keep_size) lost its WAL, a gap; "was not created in this database",
            # wal_level changed under us: permanent
            text = _first_line(exc)
            if "can no longer get changes" in text or "invalidated" in text:
                raise LogGap(f"replication slot {self.slot!r}: {what}: {text}") from None
            raise PermanentError(f"source {redact_url(self.source.url)}: {what}: {text}") from None
        except psycopg.errors.UndefinedObject as exc:  # the slot went away between two statements
            raise LogGap(f"replication slot {self.slot!r}: {what}: {_first_line(exc)}") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise PermanentError(
                f"source {redact_url(self.source.url)}: {what}: {_first_line(exc)}; change capture needs the "
                "REPLICATION attribute (ALTER ROLE ... WITH REPLICATION) or a superuser"
            ) from None
        except psycopg.OperationalError as exc:
            self._drop_connection()
            raise TransientError(f"source {redact_url(self.source.url)}: {what}: {_first_line(exc)}") from None
        except psycopg.Error as exc:  # any other refusal repeats itself: never retried for ever
            raise PermanentError(f"source {redact_url(self.source.url)}: {what}: {_first_line(exc)}") from None

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        self._drop_connection()

    # -- checks ------------------------------------------------------------------------------------
    def check(self) -> None:
        with self._cursor("checking logical decoding") as cur:
            cur.execute("SHOW wal_level")
            row = cur.fetchone()
            level = row[0] if row else "?"
            if level != "logical":
                raise ConfigError(
                    f"source.url: PostgreSQL has wal_level = {level!r}; change capture needs wal_level = logical "
                    "(set it in postgresql.conf and restart the server), or use sync.source: polling"
                )
            for table in self.tables:
                cur.execute(
                    "SELECT c.relreplident, c.oid FROM pg_class c WHERE c.oid = to_regclass(%s)",
                    (_quote_ident(table.name),),
                )
                found = cur.fetchone()
                if found is None:
                    raise ConfigError(f"{table.where}: table {table.name!r} not found in the source")
                identity = self._identity_columns(cur, found[1], found[0])
                self._check_identity(table.name, table.link_columns, table.where, found[0], identity)

    @staticmethod
    def _identity_columns(cur: psycopg.Cursor[Any], oid: int, kind: str) -> list[str] | None:
        """The columns a DELETE logs: None for all (FULL)."""
        if kind == "f":
            return None
        if kind == "n":
            return []
        flag = "indisprimary" if kind == "d" else "indisreplident"
        cur.execute(
            f"SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            f"AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.{flag}",
            (oid,),
        )
        return [r[0] for r in cur.fetchall()]

    @staticmethod
    def _check_identity(table: str, needed: list[str], where: str, kind: str, identity: list[str] | None) -> None:
        if identity is None:
            return
        if not identity:
            raise ConfigError(
                f"{where}: table {table!r} has no primary key or replica identity, so PostgreSQL logs no key for its "
                f"updates and deletes; add a primary key or run ALTER TABLE {_quote_ident(table)} REPLICA IDENTITY FULL"
            )
        missing = [c for c in needed if c not in identity]
        if missing:
            raise ConfigError(
                f"{where}: a delete from table {table!r} must reveal column(s) {', '.join(missing)} to find the "
                f"document it belongs to, but its replica identity logs only {', '.join(identity)}; run "
                f"ALTER TABLE {_quote_ident(table)} REPLICA IDENTITY FULL"
            )

    # -- the slot ----------------------------------------------------------------------------------
    def _slot_position(self, cur: psycopg.Cursor[Any]) -> int | None:
        cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
        row = cur.fetchone()
        return None if row is None or row[0] is None else lsn_int(row[0])

    def _slot_row(self, cur: psycopg.Cursor[Any], name: str) -> tuple[str | None, int | None, bool] | None:
        """(database, confirmed position, in this database) of slot *name*, None if there is none."""
        cur.execute(
            "SELECT database, confirmed_flush_lsn::text, database = current_database() FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (name,),
        )
        row = cur.fetchone()
        if row is None:
            return None
        return row[0], (None if row[1] is None else lsn_int(row[1])), bool(row[2])

    def _refuse_foreign(self, found: tuple[str | None, int | None, bool] | None) -> None:
        if found is not None and not found[2]:
            raise PermanentError(
                f"replication slot {self.slot!r} belongs to database {found[0]!r}, not to {self.database!r}: "
                "a slot reads one database only. Give this pipeline its own sync.slot prefix"
            )

    def prepare(self) -> None:
        """Adopt a slot named the old way (``<prefix>_<consumer>``) of this database: copied under
        the new name with its position (``pg_copy_logical_replication_slot``), then dropped, so no
        WAL is retained for a name nobody reads any more. One of another database is left alone."""
        if self.legacy_slot == self.slot:
            return
        with self._cursor(f"adopting slot {self.legacy_slot!r}") as cur:
            legacy = self._slot_row(cur, self.legacy_slot)
            if legacy is None or not legacy[2]:
                return
            if self._slot_row(cur, self.slot) is None:
                with contextlib.suppress(psycopg.errors.DuplicateObject):  # adopted by another process just now
                    cur.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (self.legacy_slot, self.slot))
            cur.execute("SELECT pg_drop_replication_slot(%s)", (self.legacy_slot,))
            log.warning(
                "replication slot %s adopted as %s (slots now carry the database and pipeline)",
                self.legacy_slot,
                self.slot,
            )

    def continuity(self, offset: Mapping[str, Any]) -> Gap | None:
        stored = self.position(offset)
        with self._cursor(f"checking slot {self.slot!r}") as cur:
            found = self._slot_row(cur, self.slot)
            cur.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            status = cur.fetchone()
        self._refuse_foreign(found)
        if found is not None and status is not None and status[0] == "lost":
            return Gap(
                f"replication slot {self.slot!r} was invalidated (wal_status lost: max_slot_wal_keep_size "
                f"removed WAL it still needed); the WAL after the stored position {lsn_text(stored)} is gone",
                stored,
            )
        if found is None:
            return Gap(
                f"replication slot {self.slot!r} does not exist (dropped by hand, by another pipeline's "
                f"--drop-slot, or lost in a failover); the WAL after the stored position {lsn_text(stored)} is gone",
                stored,
            )
        at = found[1] or 0
        if at > stored:
            return Gap(
                f"replication slot {self.slot!r} confirms {lsn_text(at)}, past the stored position {lsn_text(stored)} "
                "(created again, or advanced by another reader): what committed in between is gone from the log",
                stored,
                at,
            )
        return None

    def start(self) -> dict[str, Any]:
        with self._cursor(f"checking slot {self.slot!r}") as cur:
            self._refuse_foreign(self._slot_row(cur, self.slot))
        with self._cursor(f"creating slot {self.slot!r}") as cur:
            position = self._slot_position(cur)
            if position is None:
                try:
                    cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)", (self.slot, PLUGIN))
                except psycopg.errors.UndefinedFile as exc:
                    raise ConfigError(
                        f"source.url: the PostgreSQL server lacks the {PLUGIN} output plugin "
                        f"(install postgresql-<version>-wal2json): {_first_line(exc)}"
                    ) from None
                except psycopg.errors.DuplicateObject:
                    pass  # another process created it a moment ago
                position = self._slot_position(cur)
                log.info("created replication slot %s at %s", self.slot, lsn_text(position or 0))
        return {"lsn": position or 0}

    def drop(self) -> bool:
        with self._cursor(f"dropping slot {self.slot!r}") as cur:
            if self._slot_position(cur) is None:
                cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
                if cur.fetchone() is None:
                    return False
            cur.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        return True

    def exists(self) -> bool:
        with self._cursor(f"looking up slot {self.slot!r}") as cur:
            cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            return cur.fetchone() is not None

    def position(self, offset: Mapping[str, Any]) -> int:
        return int(offset.get("lsn", 0))

    #: how long head() waits for the WAL it forced out to be reported flushed
    flush_wait_s: float = 10.0

    def head(self) -> dict[str, Any]:
        """The insert position now, once it is flushed (decoding reads only flushed WAL).

        With ``synchronous_commit = off``, or behind an open transaction that has written but not
        committed, the tail of the WAL can sit unflushed until the next background record (up to
        15 s on an idle server). Waiting for that made a quiet server look unreachable, so a head
        not yet flushed is forced out by a synchronous commit of our own, which flushes
        everything before its commit record."""
        with self._cursor("reading the WAL position") as cur:
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            row = cur.fetchone()
            target = lsn_int(row[0]) if row else 0
            if self._flushed(cur) < target:
                self._force_flush(cur)
            deadline = time.monotonic() + self.flush_wait_s
            while self._flushed(cur) < target:
                if time.monotonic() > deadline:
                    # a head the peek cannot see yet must not be stored as caught up
                    raise TransientError(
                        f"the WAL was not flushed up to {lsn_text(target)} within {self.flush_wait_s:g} s"
                    )
                time.sleep(0.02)
        return {"lsn": target}

    @staticmethod
    def _flushed(cur: psycopg.Cursor[Any]) -> int:
        cur.execute("SELECT pg_current_wal_flush_lsn()::text")
        row = cur.fetchone()
        return lsn_int(row[0]) if row else 0

    @staticmethod
    def _force_flush(cur: psycopg.Cursor[Any]) -> None:
        """A transaction that wrote WAL and commits synchronously flushes everything before its
        commit record. An empty message is the cheapest such write: it needs no table, works in
        a read-only session, and decoders skip it (``action`` "M"). Where EXECUTE on it was
        revoked, the caller waits for the flush instead."""
        try:
            with cur.connection.transaction():
                # local: the flush is all decoding needs (on would also wait for synchronous standbys)
                cur.execute("SET LOCAL synchronous_commit = local")
                cur.execute("SELECT pg_logical_emit_message(true, 'sparkindex.head', '')")
        except psycopg.errors.InsufficientPrivilege as exc:  # EXECUTE revoked: wait for the flush instead
            log.info("cannot force the WAL out (%s); waiting for the server to flush it", _first_line(exc))

    def acknowledge(self, offset: Mapping[str, Any]) -> None:
        target = self.position(offset)
        with self._cursor(f"advancing slot {self.slot!r}") as cur:
            current = self._slot_position(cur)
            if current is None:
                raise LogGap(f"replication slot {self.slot!r} disappeared while the sync ran", stored=target)
            cur.execute("SELECT pg_current_wal_flush_lsn()::text")
            row = cur.fetchone()
            flushed = lsn_int(row[0]) if row else 0
            upto = min(target, flushed)
            if upto > current:
                cur.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, lsn_text(upto)))

    def lag(self, offset: Mapping[str, Any]) -> Lag:
        with self._cursor(f"measuring the lag of slot {self.slot!r}") as cur:
            cur.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (self.slot,),
            )
            row = cur.fetchone()
        retained = int(row[0]) if row and row[0] is not None else None
        oldest = self.oldest_pending(offset)
        seconds = max(0.0, time.time() - oldest.ts) if oldest is not None else 0.0
        return Lag(retained, seconds)

    # -- reading -----------------------------------------------------------------------------------
    def _table_names(self, cur: psycopg.Cursor[Any]) -> dict[tuple[str, str], str]:
        """(schema, table) as the log names them -> the pipeline's table names."""
        if self._names is None:
            names: dict[tuple[str, str], str] = {}
            for table in self.tables:
                cur.execute(
                    "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.oid = to_regclass(%s)",
                    (_quote_ident(table.name),),
                )
                row = cur.fetchone()
                if row is not None:
                    names[(row[0], row[1])] = table.name
            self._names = names
        return self._names

    def read(self, start: Mapping[str, Any], limit: int, until: Mapping[str, Any] | None = None) -> Batch:
        after = self.position(start)
        upto = None if until is None else lsn_text(self.position(until))
        with self._cursor(f"reading slot {self.slot!r}") as cur:
            names = self._table_names(cur)
            found = self._slot_row(cur, self.slot)
            self._refuse_foreign(found)
            slot_at = None if found is None else found[1]
            if slot_at is None:
                raise LogGap(f"replication slot {self.slot!r} disappeared while the sync ran", stored=after)
            if slot_at > after:
                raise LogGap(
                    f"replication slot {self.slot!r} confirms {lsn_text(slot_at)}, past the position read from "
                    f"{lsn_text(after)}: created again, or advanced by another reader",
                    stored=after,
                    available=slot_at,
                )
            if slot_at < after:
                # acknowledged in the store but not in the slot (a crash between the two): catch up
                cur.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, lsn_text(after)))
            cur.execute(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, %s::pg_lsn, %s, "
                "'format-version', '2', 'include-timestamp', '1', 'include-transaction', '1', "
                "'include-type-oids', '0', 'add-tables', %s)",
                (self.slot, upto, limit, add_tables(names)),
            )
            rows = cur.fetchall()
        return self._parse(rows, after, start, names, limit)

    @staticmethod
    def _parse(
        rows: list[tuple[str, str]],
        after: int,
        start: Mapping[str, Any],
        names: dict[tuple[str, str], str],
        limit: int,
    ) -> Batch:
        changes, end, ts = parse_rows(rows, after, names)
        offset = {"lsn": end} if end > after else dict(start)
        return Batch(changes, offset, end, ts, more=len(rows) >= limit)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    return redact_url(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
