"""The chaos campaign's fault tools, each on the real thing: private database servers restarted for
real, a tmpfs filled to ENOSPC, a child process's clock jumped by libfaketime (a PySpark job under
it), a PostgreSQL connection black-holed and healed, real processes found in /proc."""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import MySQLdb  # type: ignore[import-untyped]  # no stubs in the venv
import psycopg
import pytest
from chaos.clock import ClockJump, ensure_faketime
from chaos.disk import SmallDisk
from chaos.netcut import NetCut
from chaos.servers import PG_BIN, MariaDbServer, PgServer, run_tool

from chaos import procs
from tests.cluster.standalone import StandaloneCluster, free_port


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll probe until it returns something truthy; that value, or AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """A directory outside pytest's 0700 tree: the servers run as postgres/mysql and must reach it."""
    path = Path(tempfile.mkdtemp(prefix="sparkindex-chaos-tools-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def pg(scratch: Path) -> Iterator[PgServer]:
    with PgServer(scratch / "pg", free_port()) as server:
        yield server


@pytest.fixture(scope="module")
def maria(scratch: Path) -> Iterator[MariaDbServer]:
    with MariaDbServer(scratch / "mariadb", free_port()) as server:
        yield server


class Lines:
    """A child's stdout, written to a file (never a pipe, which fills), read back line by line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[str]:
        text = self.path.read_text(encoding="utf-8", errors="replace") if self.path.exists() else ""
        return text.splitlines()[: text.count("\n")]  # complete lines only

    def starting(self, prefix: str, timeout: float = 30.0, after: int = 0) -> list[str]:
        """Wait for a line starting with prefix (beyond the first `after` lines); its words."""
        line = wait_for(
            f"a line {prefix!r} in {self.path}",
            lambda: next((x for x in self.all()[after:] if x.startswith(prefix)), None),
            timeout,
        )
        return str(line).split()


def spawn(argv: list[str], logs: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Lines]:
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "out", "wb") as out, open(logs / "err", "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
    return proc, Lines(logs / "out")


def end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        procs.kill_tree(proc.pid)
        proc.wait(timeout=30)


# -- servers ------------------------------------------------------------------------------------------------


def test_pg_server_restart_immediate_slots_and_drops(pg: PgServer, scratch: Path) -> None:
    assert pg.url("shop") == f"postgresql+psycopg://sparkindex@127.0.0.1:{pg.port}/shop"
    began = time.monotonic()
    assert PgServer(pg.workdir, pg.port).start().ready()  # idempotent: the running server is reused
    assert time.monotonic() - began < 2
    with pytest.raises(RuntimeError, match="another PostgreSQL"):
        PgServer(scratch / "other-pg", pg.port).start()  # a server that is not ours is never adopted
    with pg.connect() as conn:
        settings = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
    assert (settings["wal_level"], settings["max_replication_slots"], settings["fsync"]) == ("logical", "20", "off")

    pg.create_database("chaos_pg")
    pg.create_database("chaos_pg")  # exists already: nothing
    with pg.connect("chaos_pg") as conn:
        conn.execute("CREATE TABLE t (k int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("SELECT pg_create_logical_replication_slot('chaos_idle', 'wal2json')")
        conn.execute("SELECT pg_create_logical_replication_slot('chaos_read', 'wal2json')")

    def reader() -> subprocess.Popen[bytes]:
        argv = [str(PG_BIN / "pg_recvlogical"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "sparkindex"]
        argv += ["-d", "chaos_pg", "--slot", "chaos_read", "--start", "-f", os.devnull, "--no-loop"]
        return subprocess.Popen(argv, stderr=subprocess.DEVNULL)

    stream = reader()
    wait_for("the slot read", lambda: ("chaos_read", "chaos_pg", True) in pg.slots("chaos_pg"))
    assert pg.slots("chaos_pg") == [("chaos_idle", "chaos_pg", False), ("chaos_read", "chaos_pg", True)]
    assert pg.slots("no_such_db") == []

    before = pg.connect("chaos_pg")
    seconds = pg.restart_immediate()
    with pytest.raises(psycopg.OperationalError):
        before.execute("SELECT 1")
    before.close()
    with pg.connect("chaos_pg") as after:
        assert after.execute("SELECT k FROM t").fetchall() == [(1,)]
    assert seconds < 30
    assert stream.wait(timeout=30) != 0  # its walsender went down with the server
    assert [s[0] for s in pg.slots("chaos_pg")] == ["chaos_idle", "chaos_read"]  # slots survive a crash

    stream = reader()
    wait_for("the slot read again", lambda: ("chaos_read", "chaos_pg", True) in pg.slots("chaos_pg"))
    assert pg.drop_slot("chaos_read") is True  # its reader is terminated first
    assert stream.wait(timeout=30) != 0
    assert pg.drop_slot("chaos_read") is False
    assert [s[0] for s in pg.slots()] == ["chaos_idle"]

    held = pg.connect("chaos_pg")
    held.execute("BEGIN")
    held.execute("SELECT * FROM t FOR UPDATE")
    pg.drop_database("chaos_pg")  # with a slot and a session in it
    with pg.connect() as conn:
        assert conn.execute("SELECT 1 FROM pg_database WHERE datname = 'chaos_pg'").fetchone() is None
    assert pg.slots() == []
    held.close()


def test_mariadb_server_restart_immediate_purge_and_drop(maria: MariaDbServer, scratch: Path) -> None:
    assert maria.url("shop") == f"mysql://root@127.0.0.1:{maria.port}/shop"
    assert MariaDbServer(maria.workdir, maria.port).start().ready()
    with pytest.raises(RuntimeError, match="another MariaDB"):
        MariaDbServer(scratch / "other-mariadb", maria.port).start()
    settings = dict(maria.query("SHOW VARIABLES WHERE variable_name IN ('binlog_format', 'binlog_row_image')"))
    assert settings == {"binlog_format": "ROW", "binlog_row_image": "FULL"}
    # its own temporary directory, never the shared /tmp whose #sql* files a starting server deletes
    assert Path(str(maria.query("SELECT @@tmpdir")[0][0])).resolve() == maria.tmp.resolve()

    maria.create_database("chaos_my")
    maria.create_database("chaos_my")
    before = maria.connect("chaos_my")
    cur = before.cursor()
    cur.execute("CREATE TABLE t (k int PRIMARY KEY)")
    cur.execute("INSERT INTO t VALUES (1)")
    old_pid = maria.server_pid()
    seconds = maria.restart_immediate()
    assert maria.server_pid() not in (None, old_pid)
    with pytest.raises(MySQLdb.OperationalError):
        cur.execute("SELECT 1")
    before.close()
    after = maria.connect("chaos_my")
    cur = after.cursor()
    cur.execute("SELECT k FROM t")
    assert cur.fetchall() == ((1,),)  # committed before the kill: recovered
    assert seconds < 60

    cur.execute("INSERT INTO t VALUES (2)")
    earlier = maria.binlogs()
    purged = maria.purge_binlogs()
    newest = maria.binlogs()
    assert len(newest) == 1 and newest[0] not in earlier and purged == earlier
    for name in earlier:  # every earlier position is gone
        with pytest.raises(MySQLdb.Error, match="find target log"):
            cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
    cur.execute("BEGIN")
    cur.execute("SELECT * FROM t FOR UPDATE")  # a metadata lock that would hold DROP DATABASE
    maria.drop_database("chaos_my")
    assert ("chaos_my",) not in maria.query("SHOW DATABASES")
    after.close()


# -- network cut --------------------------------------------------------------------------------------------


def _pg_through(cut: NetCut) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=cut.port, user="sparkindex", dbname="postgres", autocommit=True, connect_timeout=30
    )


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Event, list[Any]]:
    done, out = threading.Event(), []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, out


def test_netcut_blackholes_a_postgres_connection_then_it_carries_on(pg: PgServer) -> None:
    with NetCut("127.0.0.1", pg.port) as cut:
        conn = _pg_through(cut)
        assert conn.execute("SELECT 1").fetchone() == (1,)

        cut.cut(3.0)
        assert cut.cutting
        began = time.monotonic()
        answered, result = _in_thread(lambda: conn.execute("SELECT 2").fetchone())
        connected, fresh = _in_thread(lambda: _pg_through(cut))
        # No answer and no error while the cut lasts: packets are dropped, nothing is reset.
        assert not answered.wait(1.5)
        assert not connected.is_set()
        assert answered.wait(15), "no answer after the cut"
        assert result == [(2,)]  # on the same connection
        assert time.monotonic() - began >= 2.5
        assert connected.wait(15)
        assert isinstance(fresh[0], psycopg.Connection)
        assert fresh[0].execute("SELECT 3").fetchone() == (3,)
        assert conn.execute("SELECT 4").fetchone() == (4,)

        cut.reset()  # a dropped connection, as opposed to a cut
        for dropped in (conn, fresh[0]):
            with pytest.raises(psycopg.OperationalError):
                dropped.execute("SELECT 5")
            dropped.close()
        with _pg_through(cut) as again:
            assert again.execute("SELECT 6").fetchone() == (6,)


def test_netcut_forwards_both_directions_exactly_under_load(pg: PgServer) -> None:
    def echo_server(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return

            def echo(c: socket.socket) -> None:
                with c:
                    while data := c.recv(65536):
                        c.sendall(data)
                    # the client's FIN reached us after all its bytes: we close in turn

            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=echo_server, args=(listener,), daemon=True).start()
    with NetCut("127.0.0.1", listener.getsockname()[1]) as cut:
        payloads = [random.Random(i).randbytes(3_000_000 + i) for i in range(6)]
        received: list[bytes] = [b""] * len(payloads)

        def client(i: int) -> None:
            with socket.create_connection(("127.0.0.1", cut.port)) as sock:

                def send() -> None:
                    sock.sendall(payloads[i])
                    sock.shutdown(socket.SHUT_WR)  # its FIN must come out after the last byte

                sender = threading.Thread(target=send)
                sender.start()
                chunks = []
                while data := sock.recv(65536):
                    chunks.append(data)
                sender.join()
                received[i] = b"".join(chunks)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(payloads))]
        for t in threads:
            t.start()
        wait_for("traffic through the forwarder", lambda: cut.forwarded > 1_000_000)
        cut.cut(0.5)  # in the middle of it: nothing may be lost or duplicated
        for t in threads:
            t.join(timeout=120)
        assert [len(r) for r in received] == [len(p) for p in payloads]
        assert received == payloads
        wait_for("every connection closed", lambda: cut.connections == 0)

    listener.close()

    # And a real protocol: large values both ways through PostgreSQL.
    with NetCut("127.0.0.1", pg.port) as cut, _pg_through(cut) as conn:
        big = "é" * 3_000_000
        row = conn.execute("SELECT md5(%s), length(repeat('x', 20000000))", (big,)).fetchone()
        assert row == (hashlib.md5(big.encode()).hexdigest(), 20_000_000)


# -- clock --------------------------------------------------------------------------------------------------


def test_clock_jump_moves_a_child_wall_clock_and_not_its_monotonic(tmp_path: Path) -> None:
    clock = ClockJump(tmp_path / "clock")
    assert ensure_faketime().name == "libfaketime.so.1"
    loop = "import time\nwhile True:\n    print(time.time(), time.monotonic(), flush=True)\n    time.sleep(0.02)\n"
    child, out = spawn([sys.executable, "-c", loop], tmp_path / "child", {**os.environ, **clock.env()})
    try:

        def offset_seen(expected: float) -> list[tuple[float, float, float]] | None:
            lines = out.all()
            if not lines:
                return None
            wall, mono = map(float, lines[-1].split())
            # The child's faked wall clock against ours (real), at about the same moment.
            return [(wall - time.time(), wall, mono)] if abs(wall - time.time() - expected) < 2 else None

        wait_for("the child's real wall clock", lambda: offset_seen(0))
        clock.jump(3600)
        wait_for("the wall clock 1 h ahead", lambda: offset_seen(3600), 10)
        clock.jump(-5400)  # cumulative: 30 min behind now
        wait_for("the wall clock 30 min behind", lambda: offset_seen(-1800), 10)
        lines = [tuple(map(float, line.split())) for line in out.all()]
        walls = [w for w, _ in lines]
        monos = [m for _, m in lines]
        assert max(walls) - min(walls) > 5000  # the wall clock jumped...
        assert all(0 <= b - a < 2 for a, b in itertools.pairwise(monos))  # ...monotonic went on
        assert child.poll() is None  # time.sleep still works under the preload
    finally:
        end(child)
        clock.close()
    assert "Traceback" not in (tmp_path / "child" / "err").read_text()


PYSPARK_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pyspark.sql import SparkSession

    flags = Path(sys.argv[1])
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    print("ready", time.time(), flush=True)
    while not (flags / "go").exists():
        time.sleep(0.05)
    total = spark.sparkContext.parallelize(range(100), 4).map(lambda x: x * 2).sum()
    in_worker = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("time").time()).collect()[0]
    in_jvm = spark.sparkContext._jvm.java.lang.System.currentTimeMillis() / 1000
    print("result", total, time.time(), in_jvm, in_worker, flush=True)
    while not (flags / "stop").exists():
        time.sleep(0.05)
    spark.stop()
    print("stopped", flush=True)
    """
)


@pytest.mark.slow
def test_pyspark_runs_under_a_jumped_clock_and_its_processes_are_found(tmp_path: Path) -> None:
    """A PySpark driver, its JVM and its Python workers all see the jumped clock and keep working."""
    clock = ClockJump(tmp_path / "clock")
    clock.jump(7200)  # before the JVM starts
    flags = tmp_path / "flags"
    flags.mkdir()
    script = tmp_path / "job.py"
    script.write_text(PYSPARK_CHILD, encoding="utf-8")
    env = {**os.environ, **clock.env(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    began = time.monotonic()
    child, out = spawn([sys.executable, str(script), str(flags)], tmp_path / "child", env)
    try:
        ready = out.starting("ready", 180)
        assert abs(float(ready[1]) - time.time() - 7200) < 5
        jvms = procs.spark_jvms(under=child.pid)
        assert [j.role for j in jvms] == ["driver-jvm"]
        assert procs.children(child.pid)[0] == jvms[0].pid  # the JVM is the driver's child

        clock.jump(3600)  # while it runs
        (flags / "go").touch()
        _, total, in_python, in_jvm, in_worker = out.starting("result", 120)
        assert int(total) == 9900
        assert abs(float(in_python) - time.time() - 10800) < 5
        assert abs(float(in_jvm) - float(in_python)) < 5
        assert abs(float(in_worker) - float(in_python)) < 5
        assert time.monotonic() - began < 150  # not crawling: see chaos.clock on the monotonic fix

        workers = procs.python_workers(under=child.pid)
        assert workers, procs.children(child.pid)
        daemon = procs.parent(workers[0])
        assert daemon is not None and procs.cmdline(daemon) == procs.cmdline(workers[0])
        assert procs.signal_pid(workers[0], signal.SIGKILL)
        assert procs.wait_gone(workers[0], 10)
        assert not procs.signal_pid(workers[0], signal.SIGKILL)

        (flags / "stop").touch()
        assert child.wait(timeout=120) == 0
    finally:
        end(child)
        clock.close()
    assert out.starting("stopped", 1)


# -- disk ---------------------------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_small_disk_fills_to_enospc_and_frees(tmp_path: Path) -> None:
    with SmallDisk(tmp_path / "disk", 8) as disk:
        assert disk.mounted
        (disk.path / "index.bin").write_bytes(b"x" * 100_000)
        written = disk.fill()
        assert 7_000_000 < written < 8 * 2**20
        assert disk.available() == 0
        fd = os.open(disk.path / "more.bin", os.O_WRONLY | os.O_CREAT)  # a new file: an inode, no block
        try:
            with pytest.raises(OSError) as full:
                os.write(fd, b"y")
        finally:
            os.close(fd)
        assert full.value.errno == errno.ENOSPC
        disk.free()
        assert disk.available() > 7_000_000
        (disk.path / "more.bin").write_bytes(b"y" * 1_000_000)
        disk.mount()  # mounted already: nothing
        busy = open(disk.path / "more.bin", "rb")  # noqa: SIM115 - held open across the unmount
    assert not disk.mounted  # lazily unmounted although a file was open
    busy.close()


# -- processes ----------------------------------------------------------------------------------------------

FORKING_CHILD = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        time.sleep(600)
    print("forked", flush=True)
    time.sleep(600)
    """
)


def test_procs_find_children_by_command_line_and_signal_them(tmp_path: Path) -> None:
    # A parent that forks a child with its own command line, as pyspark.daemon does, and a grandchild.
    argv = [sys.executable, "-m", "pyspark.daemon", "pyspark.worker"]
    fake = tmp_path / "pyspark" / "daemon.py"
    fake.parent.mkdir()
    (fake.parent / "__init__.py").write_text("")
    fake.write_text(FORKING_CHILD + "\n", encoding="utf-8")
    sleeper = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)"]
    top, _ = spawn([*sleeper, *argv], tmp_path / "top", {**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        tree = wait_for("two descendants", lambda: len(procs.children(top.pid)) == 2 and procs.children(top.pid))
        daemon = tree[0]
        forked = tree[1]
        assert procs.parent(daemon) == top.pid and procs.parent(forked) == daemon
        assert procs.cmdline(daemon) == argv == procs.cmdline(forked)
        assert procs.python_module(argv) == "pyspark.daemon"
        assert procs.find(lambda a: a == argv, under=top.pid) == [daemon, forked]
        assert procs.python_workers(under=top.pid) == [forked]  # the fork runs tasks, not the daemon
        assert procs.spark_jvms(under=top.pid) == []

        assert procs.signal_pid(forked, signal.SIGKILL)
        assert procs.wait_gone(forked, 10)
        assert not procs.signal_pid(forked, signal.SIGKILL)  # already gone
        assert procs.cmdline(forked) == []
        assert sorted(procs.kill_tree(top.pid)) == sorted([top.pid, daemon])
        assert top.wait(timeout=10) == -signal.SIGKILL
    finally:
        end(top)


def test_spark_roles_from_command_lines() -> None:
    java = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
    cp = ["-cp", "/x/jars/*", "-Xmx1g"]
    assert procs.spark_role([java, *cp, "org.apache.spark.deploy.SparkSubmit", "--master", "local"]) == "driver-jvm"
    executor = [java, *cp, "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--driver-url", "spark://x"]
    assert procs.spark_role(executor) == "executor"
    assert procs.spark_role([java, *cp, "org.apache.spark.deploy.worker.Worker", "spark://h:7077"]) == "worker"
    assert procs.spark_role([java, *cp, "org.apache.spark.deploy.master.Master", "--host", "h"]) == "master"
    assert procs.spark_role([java, "-jar", "other.jar"]) is None
    assert procs.spark_role(["python3", "org.apache.spark.deploy.SparkSubmit"]) is None


DRIVER_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false").getOrCreate()
    print("result", spark.sparkContext.parallelize(range(10), 2).map(lambda x: x + 1).sum(), flush=True)
    while not Path(sys.argv[2]).exists():
        time.sleep(0.05)
    spark.stop()
    """
)


@pytest.mark.slow
@pytest.mark.cluster
def test_spark_jvms_of_a_standalone_cluster_are_classified(tmp_path: Path) -> None:
    cluster = StandaloneCluster(tmp_path / "cluster", workers=1).start()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER_CHILD, encoding="utf-8")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    driver, out = spawn([sys.executable, str(script), cluster.url, str(tmp_path / "stop")], tmp_path / "d", env)
    try:
        assert out.starting("result", 180)[1] == "55"
        master, worker = cluster.procs[0].pid, cluster.worker(0).pid
        roles = {j.pid: j.role for j in procs.spark_jvms()}
        assert roles[master] == "master" and roles[worker] == "worker"
        executors = procs.spark_jvms(under=worker)
        assert [j.role for j in executors] == ["executor"]
        assert [j.role for j in procs.spark_jvms(under=driver.pid)] == ["driver-jvm"]
        assert procs.python_workers(under=executors[0].pid)  # the executor's forked Python workers
        (tmp_path / "stop").touch()
        assert driver.wait(timeout=120) == 0
    finally:
        end(driver)
        cluster.stop()


def test_a_server_tool_that_times_out_takes_its_children_with_it(tmp_path: Path) -> None:
    """``mariadb-install-db`` is a script whose bootstrap server is its child: a timeout that
    killed only the script left that server running, holding the data directory. The stand-in
    is a shell that starts a long sleep in the background, its output away from the tool's pipes
    (so that only killing the group, not waiting for the pipes to close, can end it), and waits."""
    pid_file = tmp_path / "child.pid"
    with pytest.raises(RuntimeError, match="did not finish in 1 s"):
        run_tool(["sh", "-c", f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}; wait"], "the stand-in", timeout=1)
    child = int(wait_for("the child's pid", lambda: pid_file.exists() and pid_file.read_text().strip()))
    assert procs.wait_gone(child, 10), f"the tool's child {child} outlived the timeout"


def test_a_server_tool_that_fails_says_so_with_its_output() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)the stand-in failed \(3\): to stdout.*to stderr"):
        run_tool(["sh", "-c", "echo to stdout; echo to stderr >&2; exit 3"], "the stand-in")
    assert run_tool(["sh", "-c", "echo fine"], "the stand-in").stdout == "fine\n"
