"""Private PostgreSQL and MariaDB servers for the campaign.

The campaign restarts its database servers (SIGKILL, ``pg_ctl -m immediate``), drops replication
slots and purges binlogs. It must never do that to the test suite's shared servers
(``scripts/test-services.sh``), which other tests use at the same time, so each campaign runs its own
instances, configured as that script configures the shared ones (logical decoding with wal2json;
ROW binlogs with full images and metadata, strict GTIDs), on ports of its own, under a directory of
its own.

A server already answering on the port is reused only if it serves this object's data directory:
a shared server can never be adopted, and so never restarted, by mistake.

The servers run as their own OS users (postgres, mysql), as Debian runs them and as the script
does; PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import MySQLdb  # type: ignore[import-untyped]  # no stubs in the venv
import psycopg
from psycopg import sql

from chaos import procs

PG_BIN = Path("/usr/lib/postgresql/15/bin")
READY_TIMEOUT_S = 120.0
PG_USER = "sparkindex"


def _wait_for(what: str, probe: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> None:
    """Poll probe until it holds; RuntimeError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not after {timeout:.0f} s")
        time.sleep(0.05)


def _grant_traversal(path: Path) -> None:
    """Let other users pass through (not list) every directory down to path.

    The servers run as postgres and mysql, which must reach a data directory that may sit under a
    0700 directory of root's (pytest's tmp_path, ``tempfile.mkdtemp``). Only the search bit (o+x) is
    added, and only where missing. Re-done before every start: pytest takes group and other bits off
    /tmp/pytest-of-root when another session begins.
    """
    for directory in [*reversed(path.resolve().parents), path.resolve()]:
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _socket_dir(preferred: Path) -> Path:
    """Where a server's Unix socket goes: its data directory, unless that path is too long for a socket
    address (108 bytes, and both servers refuse to start without their socket); then /tmp, where the
    port in the socket's name keeps it apart from every other server's."""
    return preferred if len(str(preferred)) < 80 else Path("/tmp")


def _as_user(user: str, argv: list[str]) -> list[str]:
    """argv run as user when we are root (as the script's ``su``), else as ourselves."""
    return ["runuser", "-u", user, "--", *argv] if os.geteuid() == 0 else argv


def run_tool(argv: list[str], what: str, timeout: float = READY_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a server tool in a session of its own; a failure raises RuntimeError with its output.

    Whatever ends the wait early (the timeout, a test's own timeout, Ctrl-C) kills the tool's
    whole process group, not only the tool: ``mariadb-install-db`` is a script whose bootstrap
    server would live on, holding the data directory."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the session's leader: its pgid is its pid
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            out, err = proc.communicate(timeout=READY_TIMEOUT_S)  # the group's pipes close as it dies
            raise RuntimeError(f"{what} did not finish in {timeout:g} s: {out[-2000:]}{err[-2000:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {out[-2000:]}{err[-2000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def own_for_mysql(directory: Path) -> None:
    """Create *directory* (if need be) owned by the ``mysql`` user when we are root, as mariadbd
    runs as that user then."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(directory, "mysql", "mysql")


def bootstrap_mariadb(data: Path, tmp: Path, timeout: float = READY_TIMEOUT_S) -> None:
    """Bootstrap the data directory *data*, its bootstrap server using *tmp* as its temporary
    directory, once more if the first attempt fails, with the tool's own words in the error.

    Why its own temporary directory: a starting mariadbd (a bootstrap too) deletes every ``#sql*``
    file in its tmpdir; in a shared /tmp, those of the servers already running. A fresh-clone run
    lost a bootstrap's temporary table that way ("Could not remove temporary table:
    '/tmp/#sql-temptable-…', error: 2", then "Unknown table 'mysql.tmp_user_sys'"); an earlier
    one saw the tool exit 1 half-way through the ``sys`` schema with its output lost."""
    failures: list[str] = []
    for _attempt in range(2):
        for directory in (data, tmp):
            shutil.rmtree(directory, ignore_errors=True)
            own_for_mysql(directory)
        try:
            run_tool(
                [
                    "mariadb-install-db",
                    *(["--user=mysql"] if os.geteuid() == 0 else []),
                    f"--datadir={data}",
                    f"--tmpdir={tmp}",  # passed on to the bootstrap server
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                "mariadb-install-db",
                timeout,
            )
            return
        except RuntimeError as exc:
            failures.append(str(exc))
    raise RuntimeError(f"mariadb-install-db failed twice in {data}:\n" + "\n---\n".join(failures))


class _Server:
    """What both servers share: start/stop as a context manager."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class PgServer(_Server):
    """A private PostgreSQL 15 on 127.0.0.1:port, data in workdir/data, user ``sparkindex`` (trust)."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir, self.port = workdir, port
        self.data = workdir / "data"
        self.log = workdir / "server.log"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres", timeout: int = 5) -> psycopg.Connection[Any]:
        """An autocommit connection as the superuser (what the admin calls below use)."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=PG_USER, dbname=database, autocommit=True, connect_timeout=timeout
        )

    def ready(self) -> bool:
        """True when a connection is accepted and answers."""
        try:
            with self.connect(timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120", *args]
        return run_tool(_as_user("postgres", argv), f"pg_ctl {' '.join(args)}")

    def _initdb(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
            self.log.touch()
            shutil.chown(self.log, "postgres", "postgres")
        argv = [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", PG_USER, "--auth=trust", "-E", "UTF8"]
        run_tool(_as_user("postgres", argv), "initdb")
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(
                "\n# chaos.servers.PgServer: as scripts/test-services.sh, with room for more slots\n"
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{_socket_dir(self.data)}'\n"
                "wal_level = logical\nmax_replication_slots = 20\nmax_wal_senders = 20\nmax_connections = 200\n"
                "fsync = off\nsynchronous_commit = off\n"
            )

    def _serves_our_data(self) -> bool:
        with self.connect() as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        return row is not None and Path(str(row[0])).resolve() == self.data.resolve()

    def running(self) -> bool:
        """True if this data directory's postmaster is alive (whether or not it accepts connections yet)."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        return procs.alive(pid) and "postgres" in " ".join(procs.cmdline(pid))

    def start(self) -> Self:
        """Start (initdb on first use); reuse this data directory's server if it already runs."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        _grant_traversal(self.workdir)
        if self.ready():
            if not self._serves_our_data():
                raise RuntimeError(f"port {self.port} is served by another PostgreSQL, not {self.data}")
            return self
        if not self.running():
            if not (self.data / "PG_VERSION").exists():
                self._initdb()
            self._pg_ctl("start")
        _wait_for(f"PostgreSQL on {self.port} accepting connections", self.ready)
        return self

    def restart_immediate(self) -> float:
        """As after a crash: ``pg_ctl -m immediate stop`` (no checkpoint, every connection cut, walsenders
        included), then start (crash recovery). Returns when connections are accepted again, with the
        seconds it took.
        """
        began = time.monotonic()
        _grant_traversal(self.workdir)
        if self.running():
            self._pg_ctl("stop", "-m", "immediate")
        self._pg_ctl("start")
        _wait_for(f"PostgreSQL on {self.port} accepting connections", self.ready)
        return time.monotonic() - began

    def stop(self) -> None:
        """Fast shutdown of this data directory's server; nothing if it is not running."""
        if self.running():
            self._pg_ctl("stop", "-m", "fast")

    def create_database(self, name: str) -> None:
        """Create the database if it does not exist."""
        with self.connect() as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop_database(self, name: str, timeout: float = 60.0) -> None:
        """Drop the database if it exists, whoever uses it: its replication slots are dropped first (their
        readers terminated), then its backends terminated (``WITH (FORCE)``). PostgreSQL refuses to drop a
        database that still has a logical slot, so a slot created meanwhile is dropped and the drop retried.
        """
        deadline = time.monotonic() + timeout
        while True:
            for slot, _db, _active in self.slots(name):
                self.drop_slot(slot)
            with self.connect() as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
                try:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                    return
                except psycopg.errors.ObjectInUse:
                    if time.monotonic() > deadline:
                        raise
            time.sleep(0.05)  # a slot was created meanwhile: go round again

    def slots(self, database: str | None = None) -> list[tuple[str, str, bool]]:
        """(slot_name, database, active) of every replication slot, or of one database's ('' for physical)."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT slot_name, coalesce(database, ''), active FROM pg_replication_slots ORDER BY slot_name"
            ).fetchall()
        return [(str(r[0]), str(r[1]), bool(r[2])) for r in rows if database is None or r[1] == database]

    def drop_slot(self, name: str, timeout: float = 30.0) -> bool:
        """Drop a replication slot as an operator would, even while a reader streams from it: the walsender
        holding it is terminated, then the slot dropped (retried if the reader re-acquired it meanwhile).
        Returns False if there was no such slot.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self.connect() as conn:
                row = conn.execute(
                    "SELECT coalesce(database, 'postgres'), active_pid FROM pg_replication_slots WHERE slot_name = %s",
                    (name,),
                ).fetchone()
            if row is None:
                return False
            database, active_pid = str(row[0]), row[1]
            # A logical slot can only be dropped from its own database.
            with self.connect(database) as conn:
                if active_pid is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (active_pid,))
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
                    return True
                except psycopg.errors.UndefinedObject:
                    return False
                except psycopg.errors.ObjectInUse:
                    if time.monotonic() > deadline:
                        raise
            time.sleep(0.02)  # the terminated walsender is still letting go of the slot


class MariaDbServer(_Server):
    """A private MariaDB on 127.0.0.1:port, data in workdir/data, root without password."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir, self.port = workdir, port
        self.data = workdir / "data"
        self.pid_file = self.data / "mysqld.pid"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str | None = None, timeout: int = 5) -> Any:
        """An autocommit MySQLdb connection as root."""
        kwargs: dict[str, Any] = {"db": database} if database else {}
        return MySQLdb.connect(
            host="127.0.0.1", port=self.port, user="root", connect_timeout=timeout, autocommit=True, **kwargs
        )

    def query(self, *statements: str) -> list[tuple[Any, ...]]:
        """Run statements on one connection; the rows of the last."""
        conn = self.connect()
        try:
            cur = conn.cursor()
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall() or [])
            return rows
        finally:
            conn.close()

    def ready(self) -> bool:
        """True when a connection is accepted and answers (what ``mariadb-admin ping`` checks)."""
        try:
            self.query("SELECT 1")
        except MySQLdb.Error:
            return False
        return True

    def server_pid(self) -> int | None:
        """The pid of this data directory's mariadbd, if one is alive."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        argv = procs.cmdline(pid)
        if procs.alive(pid) and argv and Path(argv[0]).name == "mariadbd" and f"--datadir={self.data}" in argv:
            return pid
        return None

    @property
    def tmp(self) -> Path:
        """The server's own temporary directory (:func:`bootstrap_mariadb` says why)."""
        return self.workdir / "tmp"

    def _install(self) -> None:
        bootstrap_mariadb(self.data, self.tmp)

    def _spawn(self) -> None:
        own_for_mysql(self.tmp)
        out = open(self.workdir / "mariadbd.out", "ab")  # noqa: SIM115 - the server's, closed below
        try:
            self.proc = subprocess.Popen(
                [
                    "mariadbd",
                    *(["--user=mysql"] if os.geteuid() == 0 else []),
                    f"--datadir={self.data}",
                    f"--tmpdir={self.tmp}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--socket={_socket_dir(self.data)}/mariadbd-{self.port}.sock",
                    f"--pid-file={self.pid_file}",
                    f"--log-error={self.data}/error.log",
                    f"--log-bin={self.data}/binlog",
                    "--binlog-format=ROW",
                    "--server-id=1",
                    "--max-connections=300",
                    "--binlog-row-image=FULL",
                    "--binlog-row-metadata=FULL",
                    "--gtid-strict-mode=ON",
                    "--innodb-flush-log-at-trx-commit=2",
                    "--character-set-server=utf8mb4",
                    "--collation-server=utf8mb4_bin",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        finally:
            out.close()
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                log = (self.data / "error.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"mariadbd exited with {proc.returncode}: {log}")
            return self.ready()

        _wait_for(f"MariaDB on {self.port} accepting connections", up)

    def _serves_our_data(self) -> bool:
        rows = self.query("SELECT @@datadir")
        return bool(rows) and Path(str(rows[0][0])).resolve() == self.data.resolve()

    def start(self) -> Self:
        """Start (mariadb-install-db on first use); reuse this data directory's server if it already runs."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        _grant_traversal(self.workdir)
        if self.ready():
            if not self._serves_our_data():
                raise RuntimeError(f"port {self.port} is served by another MariaDB, not {self.data}")
            return self
        if self.server_pid() is not None:  # ours, still starting
            _wait_for(f"MariaDB on {self.port} accepting connections", self.ready)
            return self
        if not (self.data / "mysql").is_dir():
            self._install()
        self._spawn()
        return self

    def _kill(self, sig: int, timeout: float) -> None:
        pid = self.server_pid()
        if pid is not None:
            procs.signal_pid(pid, sig)
            if self.proc is not None and self.proc.pid == pid:
                self.proc.wait(timeout=timeout)  # our child: reap it
            elif not procs.wait_gone(pid, timeout):
                raise RuntimeError(f"mariadbd {pid} still alive {timeout:.0f} s after signal {sig}")
        self.proc = None

    def restart_immediate(self) -> float:
        """A crash: SIGKILL mariadbd, start it again (InnoDB and binlog crash recovery). Returns when it
        accepts connections again, with the seconds it took.
        """
        began = time.monotonic()
        _grant_traversal(self.workdir)
        self._kill(signal.SIGKILL, 30)
        self._spawn()
        return time.monotonic() - began

    def stop(self) -> None:
        """Clean shutdown (SIGTERM) of this data directory's server; nothing if it is not running."""
        self._kill(signal.SIGTERM, 120)

    def create_database(self, name: str) -> None:
        """Create the database if it does not exist."""
        self.query(f"CREATE DATABASE IF NOT EXISTS {_quote(name)} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")

    def drop_database(self, name: str) -> None:
        """Drop the database if it exists, whoever uses it: sessions in it are killed first (an open
        transaction's metadata lock would otherwise hold DROP DATABASE forever)."""
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> connection_id()", (name,)
            )
            for (session,) in cur.fetchall():
                with contextlib.suppress(MySQLdb.OperationalError):  # ended meanwhile
                    cur.execute(f"KILL {int(session)}")
            cur.execute(f"DROP DATABASE IF EXISTS {_quote(name)}")
        finally:
            conn.close()

    def binlogs(self) -> list[str]:
        """The binlog files the server still has, oldest first."""
        return [str(row[0]) for row in self.query("SHOW BINARY LOGS")]

    def binlog_readers(self) -> list[int]:
        """Session ids of the binlog dump threads (the change readers streaming from this server)."""
        rows = self.query("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
        return [int(r[0]) for r in rows]

    def purge_binlogs(self, timeout: float = 10.0, kill_readers: bool = True) -> list[str]:
        """Rotate to a new binlog file and purge every older one, so every position saved before is gone.

        The server will not purge a file a connected reader is still reading. A reader that keeps up
        moves to the new file right after the rotation, so the purge is retried for up to timeout
        seconds; a reader still holding an old file after that (stopped, cut off, far behind) has its
        dump thread killed when kill_readers (it reconnects, as after a network fault, to a position that
        no longer exists), else RuntimeError. Returns the purged file names.
        """
        before = self.binlogs()
        self.query("FLUSH BINARY LOGS")
        newest = self.binlogs()[-1]
        deadline = time.monotonic() + timeout
        killed = False
        while True:
            with contextlib.suppress(MySQLdb.OperationalError):  # "is in use": retried below
                self.query(f"PURGE BINARY LOGS TO '{newest}'")
            if self.binlogs() == [newest]:
                return [name for name in before if name != newest]
            if time.monotonic() > deadline:
                if not kill_readers or killed:
                    raise RuntimeError(f"binlogs still in use by a reader after {timeout:.0f} s: {self.binlogs()}")
                for session in self.binlog_readers():
                    with contextlib.suppress(MySQLdb.OperationalError):
                        self.query(f"KILL {session}")
                killed = True
                deadline = time.monotonic() + timeout
            time.sleep(0.05)


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"
