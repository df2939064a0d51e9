"""One trial: a shop indexed, then rebuilt under a writer, a live sync and the seed's faults;
then everything left to finish is finished and the invariants are checked.

The phases, in order:

1. setup: a source database with the hostile shop (:mod:`chaos.workload`), a store database
   behind a black-hole proxy, the target (Tantivy on a small tmpfs, or osmem-server, an
   OpenSearch TEST DOUBLE, behind the HTTP fault proxy and a black-hole proxy), and a first
   ``reindex`` with no faults, so the aliases exist for the sync;
2. the window: the writer commits, ``sync`` streams, a rebuild ``reindex`` runs, and each fault
   fires in its own thread at its moment. Like an operator's supervisor, the trial restarts a
   sync that died and reruns a rebuild that did not complete;
3. the finish: the writer stops, the sync gets SIGTERM, ``sync --until-caught-up`` runs, and
   :mod:`chaos.invariants` checks the result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import sqlalchemy as sa
from tests.cli_process import LoggedProcess
from tests.support.http_proxy import HttpProxy

from chaos import faults, invariants
from chaos.disk import SmallDisk
from chaos.netcut import NetCut
from chaos.plan import TrialPlan
from chaos.workload import Writer, create_shop
from sparkindex.coordination.base import store_now

if TYPE_CHECKING:
    from chaos.campaign import Campaign

log = logging.getLogger("chaos.trial")

LEASE_S = 8.0  # job.lock_ttl_s and job.claim_timeout_s of a trial's pipeline
WINDOW_LIMIT_S = 900.0  # a window longer than this is a violation: something hangs
FAULT_JOIN_S = 120.0  # how long fault threads get to end once told the window closed
HEAL_WAIT_S = 60.0  # how long the finish waits for a network cut still under way to heal
REBUILD_RUNS = 8  # reruns of an unfinished rebuild before the trial calls it stuck
#: the waits before the 1st, 2nd, 3rd... rerun of a rebuild in a row, as a scheduler paces them: a
#: rebuild that fails at once (exit 3 on a full disk) spent all its reruns inside a 12 s fault
REBUILD_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0)
MISS_RETRIES = 1  # a fault that missed its victim goes again this many times while the window is open

PIPELINE = """\
source:
  url: {source}
coordination:
  url: {store}
target:
  url: {target}
spark:
  master: {master}
  conf: {conf}
indexes:
  - alias: products
    table: products
    partition_size: 250
    relations:
      - {{name: category_info, type: object, table: categories}}
      - {{name: reviews, type: nested, table: reviews}}
  - alias: reviews
    table: reviews
    partition_size: 500
    relations:
      - name: product_info
        type: object
        table: products
        relations:
          - {{name: category_info, type: object, table: categories}}
job:
  batch_size: 100
  lock_ttl_s: {lease}
  lock_refresh_s: 2
  claim_timeout_s: {lease}
  reopen_after_s: 3
  sync_every_s: 0.5
  backoff_max_s: 2
sync:
  slot: chaos
  trigger_s: 0.3
"""


@dataclass
class Run:
    """One CLI process of the trial, and whether the campaign killed it (its exit code is then
    the kill's, not the program's)."""

    role: str
    proc: LoggedProcess
    started: float = field(default_factory=time.monotonic)
    killed: bool = False
    frozen: bool = False
    ended: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> bool:
        """SIGKILL the process's group; whether it hit. Only a hit marks the run killed: a run that
        had already ended (a crash, a traceback) keeps its own exit for the invariants to judge,
        and is not signalled (its pid, reaped, may belong to another process by now). A process
        that ended on its own between the check and the signal exits with its own code, not -9,
        and is no hit either."""
        if self.proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.killed = self.proc.returncode == -signal.SIGKILL
        return self.killed

    def describe(self) -> dict[str, Any]:
        return {"role": self.role, "pid": self.proc.pid, "exit": self.proc.returncode, "killed": self.killed}


class TrialRun:
    def __init__(self, plan: TrialPlan, campaign: Campaign) -> None:
        self.plan = plan
        self.campaign = campaign
        self.dir = campaign.workdir / f"trial-{plan.trial:03d}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.rng = random.Random(plan.seed)
        self.pg = campaign.postgres()
        self.maria = campaign.mariadb() if plan.source == "mariadb" else None
        tag = f"t{plan.trial}_{plan.seed % 10**8}"
        self.source_db, self.store_db = f"chaos_src_{tag}", f"chaos_store_{tag}"
        self.lease_s = LEASE_S
        self.runs: list[Run] = []
        self.lock = threading.Lock()
        #: held while deciding whether to start a rebuild (the fault threads and the supervisor)
        self.rebuild_lock = threading.Lock()
        self.store_cut = NetCut("127.0.0.1", self.pg.port)
        self.target_cut: NetCut | None = None
        self.http_proxy: HttpProxy | None = None
        self.disk: SmallDisk | None = None
        self.clock: Any = None
        self.osmem_clone: Any = None
        self.rebuild_done = False
        self.rebuild_runs = 0
        self.rebuild_failures = 0  # rebuild runs in a row that ended without finishing it
        self.rerun_at: float | None = None  # when the next rerun of the rebuild starts (monotonic)
        self.finishing = False
        #: set when the window closes: every wait of a fault thread ends early (chaos.faults)
        self.stopping = threading.Event()
        self.setup_error: str | None = None
        self.injected: list[dict[str, Any]] = []
        self.notes: list[str] = []

    # -- setup -------------------------------------------------------------------------------
    @property
    def source_server(self) -> Any:
        return self.maria if self.maria is not None else self.pg

    @property
    def source_url(self) -> str:
        return str(self.source_server.url(self.source_db))

    @property
    def store_direct_url(self) -> str:
        return self.pg.url(self.store_db)

    def setup(self) -> None:
        self.source_server.create_database(self.source_db)
        self.pg.create_database(self.store_db)
        self.state = create_shop(self.source_url, self.plan.source, self.plan.products, self.rng)
        self.store_cut.start()
        store = f"postgresql+psycopg://sparkindex@127.0.0.1:{self.store_cut.port}/{self.store_db}"
        if self.plan.target == "tantivy":
            self.disk = SmallDisk(self.dir / "disk", 256)
            self.disk.mount()
            target = "tantivy://disk/index"
        else:
            self.osmem_clone = self.campaign.osmem_clone()
            self.http_proxy = HttpProxy(self.osmem_clone.url)
            self.target_cut = NetCut("127.0.0.1", self.http_proxy.port)
            self.target_cut.start()
            target = f"opensearch://127.0.0.1:{self.target_cut.port}"
        master, conf = self.campaign.spark_master(self.plan.master)
        text = PIPELINE.format(
            source=self.source_url,
            store=store,
            target=target,
            master=master,
            conf=orjson.dumps(conf).decode(),  # JSON is YAML
            lease=self.lease_s,
        )
        self.pipeline = self.dir / "pipeline.yaml"
        self.pipeline.write_text(text, encoding="utf-8")
        if self.plan.clock_victim is not None:
            from chaos.clock import ClockJump  # libfaketime, installed on first use

            self.clock = ClockJump(self.dir / "clock")
        first = self._cli("reindex-setup", "reindex", "-c", str(self.pipeline), "--json")
        if first.proc.wait(timeout=900) != 0:
            raise RuntimeError(f"the first reindex (no faults yet) exited {first.proc.returncode}: {_tail(first)}")
        invariants.install_partition_history(self.store_direct_url)

    # -- processes ---------------------------------------------------------------------------
    def _cli(self, role: str, *args: str) -> Run:
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = sys.executable
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        victim = self.plan.clock_victim
        if self.clock is not None and victim is not None and role.startswith(victim):
            env.update(self.clock.env())
        cli = str(Path(sys.executable).with_name("sparkindex"))
        proc = LoggedProcess([cli, *args], self.dir / "logs", start_new_session=True, cwd=self.dir, env=env)
        run = Run(role, proc)
        with self.lock:
            self.runs.append(run)
        return run

    def start_reindex(self) -> Run:
        self.rebuild_runs += 1
        return self._cli("reindex", "reindex", "-c", str(self.pipeline), "--json")

    def start_sync(self) -> Run:
        return self._cli("sync", "sync", "-c", str(self.pipeline), "--json")

    def ensure_rebuild(self) -> None:
        """A reindex runs (a new rebuild when the last one completed): faults on a reindex
        driver need one. One decision at a time with the supervisor: never two rebuilds."""
        with self.rebuild_lock:
            running = self._reindex_alive()
            if not running:
                with self.lock:
                    self.rebuild_done = False
                self.rerun_at = None  # this run is the rerun that was due
                self.start_reindex()

    def _reindex_alive(self) -> bool:
        """Whether a reindex run is alive, frozen or not."""
        with self.lock:
            return any(r.role == "reindex" and r.alive() for r in self.runs)

    def _newest(self, role: str) -> Run | None:
        with self.lock:
            started = [r for r in self.runs if r.role == role]
        return started[-1] if started else None

    def live(self, role: str) -> Run | None:
        with self.lock:
            alive = [r for r in self.runs if r.role == role and r.alive() and not r.frozen]
        return alive[-1] if alive else None

    def ours(self, pid: int) -> bool:
        """Whether *pid* descends from a process of this trial or from the campaign's cluster."""
        from chaos import procs

        roots = [r.proc.pid for r in self.runs if r.alive()] + self.campaign.cluster_pids()
        return any(pid in procs.children(root) for root in roots)

    def _store(self) -> sa.Engine:
        return sa.create_engine(self.store_direct_url, pool_pre_ping=True)

    def alias_locks(self) -> dict[str, tuple[int, str]]:
        """Every alias lock's fencing token and holder (``host:pid:run``). A token that grew past
        the one a frozen driver held is the takeover itself: the row stays when a lock is
        released, so the token never goes back."""
        engine = self._store()
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT lock_key, token, holder FROM si_lock")).all()
            return {key: (int(token), holder) for key, token, holder in rows}
        except sa.exc.DBAPIError:
            return {}
        finally:
            engine.dispose()

    def server_waits(self) -> list[str]:
        """PostgreSQL sessions of the trial's databases that wait on a lock, and the sessions they
        wait for: a takeover stuck behind a transaction the frozen group left open shows here."""
        engine = sa.create_engine(self.pg.url("postgres"))
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text(
                        "SELECT a.pid, a.datname, a.state, a.wait_event_type, a.wait_event, pg_blocking_pids(a.pid), "
                        "left(a.query, 90), extract(epoch FROM now() - a.state_change)::int "
                        "FROM pg_stat_activity a WHERE a.datname = ANY(:dbs) AND a.pid <> pg_backend_pid() "
                        "AND (a.wait_event_type = 'Lock' OR a.state LIKE 'idle in transaction%')"
                    ),
                    {"dbs": [self.store_db, self.source_db]},
                ).all()
            return [
                f"pid {pid} on {db} {state} {age} s"
                + (f" waiting on {wtype}/{wevent} held by {blockers}" if wtype == "Lock" else "")
                + f": {query}"
                for pid, db, state, wtype, wevent, blockers, query, age in rows
            ]
        except sa.exc.DBAPIError as exc:
            return [f"pg_stat_activity unreadable: {type(exc).__name__}"]
        finally:
            engine.dispose()

    def reindexes_since(self, since: float) -> list[str]:
        """What became of the reindex runs started since *since* (``time.monotonic()``): a fault
        that missed says so, rather than only that it missed."""
        with self.lock:
            started = [r for r in self.runs if r.role == "reindex" and r.started >= since]
        told = []
        for r in started:
            ended = "running" if r.alive() else f"exit {r.proc.returncode}{' (killed)' if r.killed else ''}"
            last = [line for line in _tail(r, 600).splitlines() if line.strip()][-1:]
            told.append(f"pid {r.proc.pid} {ended}" + (f": {last[0][:200]}" if last else ""))
        return told

    def partitions_running(self) -> bool:
        """Whether a partition is in progress: PROCESSING with a lease not yet expired, judged as
        claims judge it (``claim_timeout_s`` on the store's clock). The stale claims a killed or
        frozen driver leaves behind stay PROCESSING until reclaimed, and are no moment to hit."""
        engine = self._store()
        try:
            with engine.connect() as conn:
                n = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM si_partition WHERE status = 'PROCESSING' "
                        "AND coalesce(last_heartbeat, 0) >= :since"
                    ),
                    {"since": store_now(conn) - self.lease_s},
                ).scalar()
            return bool(n)
        except sa.exc.DBAPIError:
            return False
        finally:
            engine.dispose()

    # -- the window --------------------------------------------------------------------------
    def window(self) -> None:
        self.writer = Writer(self.source_url, self.state, random.Random(self.plan.seed + 1))
        self.writer.start()
        self.start_sync()
        self.start_reindex()
        started = time.monotonic()
        threads = [
            threading.Thread(target=self._fire, args=(f, started), name=f"fault-{f.kind}@{f.at_s}", daemon=True)
            for f in self.plan.faults
        ]
        for t in threads:
            t.start()
        while True:
            self._supervise()
            if not any(t.is_alive() for t in threads) and self.rebuild_done and self.live("reindex") is None:
                break
            if time.monotonic() - started > WINDOW_LIMIT_S:
                self.notes.append(f"window still open after {WINDOW_LIMIT_S:.0f} s")
                break
            time.sleep(0.5)  # the supervisor's polling pace
        self.close_window(threads)

    def close_window(self, threads: list[threading.Thread]) -> None:
        """No fault may still act, nor a cut still hold, once the finish starts: the finish and
        the invariants would be judged under a fault no record places there. Fault threads are
        told to stop (their waits end) and joined; then a cut under way is waited out."""
        self.stopping.set()
        if self.http_proxy is not None:
            self.http_proxy.clear_rules()  # target errors armed late must not act in the finish
        deadline = time.monotonic() + FAULT_JOIN_S
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            self.notes.append(f"fault threads still running {FAULT_JOIN_S:.0f} s after the window closed: {stuck}")
        self.await_healed()

    def await_healed(self, limit: float = HEAL_WAIT_S) -> None:
        """Wait (bounded) until no network cut is in force; past *limit*, heal them and say so."""
        cuts = [c for c in (self.store_cut, self.target_cut) if c is not None]
        deadline = time.monotonic() + limit
        while any(c.cutting for c in cuts):
            if time.monotonic() > deadline:
                self.notes.append(f"a network cut still held {limit:.0f} s after the faults ended: healed by force")
                for c in cuts:
                    c.heal()
                return
            time.sleep(0.2)  # polling the cuts' own deadlines, bounded above

    def _fire(self, fault: faults.Fault, started: float) -> None:
        record: dict[str, Any] = {"kind": fault.kind, "at_s": fault.at_s}
        delay = started + fault.at_s - time.monotonic()
        if delay > 0 and self.stopping.wait(delay):  # the fault's moment, chosen by the seed
            record.update(injected=False, missed="the window closed before the fault's moment")
            with self.lock:
                self.injected.append(record)
            return
        rng = random.Random(f"{self.plan.seed}:{fault.kind}")
        misses: list[str] = []
        try:
            while "injected" not in record:
                try:
                    record.update(did=faults.inject(self, fault, rng), injected=True)
                except faults.Missed as exc:
                    # a victim taken by another fault, or a slow machine that kept the moment from
                    # coming: the fault goes again while the window is open, and says so
                    misses.append(str(exc))
                    if not exc.again or self.stopping.is_set() or len(misses) > MISS_RETRIES:
                        record.update(injected=False, missed="; then: ".join(misses))
            if misses and record["injected"]:
                record["missed_first"] = misses[0]
        except Exception as exc:  # noqa: BLE001 - a broken fault tool is reported, the trial goes on
            record.update(injected=False, error=f"{type(exc).__name__}: {exc}")
        with self.lock:
            self.injected.append(record)

    def _supervise(self) -> None:
        with self.lock:
            ended = [r for r in self.runs if not r.ended and not r.alive()]
            for r in ended:
                r.ended = True
        for r in ended:
            if r.role == "reindex":
                with self.rebuild_lock:
                    if r.proc.returncode == 0 and r is self._newest("reindex"):
                        # only the newest rebuild's success ends the rebuild: an older driver that
                        # succeeded after a fault had started another must not mark that one done
                        self.rebuild_done = True
                        self.rebuild_failures, self.rerun_at = 0, None
                    elif not self.rebuild_done and self.live("reindex") is None and self.rerun_at is None:
                        wait = REBUILD_BACKOFF_S[min(self.rebuild_failures, len(REBUILD_BACKOFF_S) - 1)]
                        self.rebuild_failures += 1
                        self.rerun_at = time.monotonic() + wait
            elif r.role == "sync" and not self.finishing and self.live("sync") is None:
                self.start_sync()
        with self.rebuild_lock:
            if self.rerun_at is not None and time.monotonic() >= self.rerun_at:
                self.rerun_at = None
                # a fault may have started one meanwhile (frozen ones count: never two rebuilds)
                if not self.rebuild_done and not self._reindex_alive():
                    if self.rebuild_runs >= REBUILD_RUNS:
                        self.notes.append(f"rebuild still unfinished after {self.rebuild_runs} runs")
                        self.rebuild_done = True  # give up: the invariants will say what is wrong
                    else:
                        self.start_reindex()

    # -- the finish --------------------------------------------------------------------------
    def finish(self) -> None:
        self.finishing = True
        self.writer.stop()
        for r in list(self.runs):
            if r.role == "sync" and r.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.proc.pid, signal.SIGTERM)
                try:
                    r.proc.wait(timeout=180)
                except subprocess.TimeoutExpired:
                    self.notes.append(f"sync pid {r.proc.pid} did not stop within 180 s of SIGTERM")
                    r.kill()
                    r.killed = False  # not a fault: it hung
        self._supervise()
        if self.clock is not None:
            self.clock.reset()  # the finish runs on real time: a jump is the window's fault only
        for attempt in range(2):
            final = self._cli("sync-final", "sync", "-c", str(self.pipeline), "--until-caught-up", "--json")
            if final.proc.wait(timeout=900) == 0:
                break
            self.notes.append(f"sync --until-caught-up #{attempt + 1} exited {final.proc.returncode}")

    def cleanup(self) -> None:
        """Every step runs whatever the others did (a failed unmount must not leave the databases
        behind for the next trial); each failure goes into the notes."""
        from chaos import procs

        self.stopping.set()  # a window the harness broke out of left its fault threads waiting

        def leftovers() -> None:
            # what outlives its starter on purpose (Tantivy writer services) goes with the trial
            for pid in procs.find(lambda args: any(str(self.dir) in a for a in args)):
                procs.signal_pid(pid, signal.SIGKILL)

        steps: list[tuple[str, Callable[[], object]]] = [
            (f"killing {r.role} pid {r.proc.pid}", r.kill) for r in self.runs if r.alive()
        ]
        steps.append(("killing the trial's leftover processes", leftovers))
        steps += [("closing the store's cut", self.store_cut.close)]
        if self.target_cut is not None:
            steps.append(("closing the target's cut", self.target_cut.close))
        if self.http_proxy is not None:
            steps.append(("closing the HTTP fault proxy", self.http_proxy.close))
        if self.osmem_clone is not None:
            clone = self.osmem_clone
            steps.append(("dropping the osmem clone", lambda: self.campaign.drop_osmem_clone(clone)))
        if self.disk is not None:
            steps.append(("unmounting the small disk", self.disk.unmount))
        if self.clock is not None:
            steps.append(("closing the fake clock", self.clock.close))
        steps.append((f"dropping {self.source_db}", lambda: self.source_server.drop_database(self.source_db)))
        steps.append((f"dropping {self.store_db}", lambda: self.pg.drop_database(self.store_db)))
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - reported in the notes; the next step still runs
                log.warning("trial %d: cleanup: %s failed: %s", self.plan.trial, what, exc)
                self.notes.append(f"cleanup: {what} failed: {type(exc).__name__}: {exc}")

    # -- the whole trial ---------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        started = time.monotonic()
        violations: list[str] = []
        try:
            try:
                self.setup()
            except Exception as exc:  # noqa: BLE001 - a trial that cannot start is reported as one
                violations.append(f"setup: {type(exc).__name__}: {exc}")
            else:
                try:
                    self.window()
                    self.finish()
                    violations += invariants.check(self)
                except Exception as exc:  # the harness broke: this trial fails, the campaign goes on
                    log.exception("trial %d: the harness failed", self.plan.trial)
                    violations.append(f"harness: {type(exc).__name__}: {exc}")
        finally:
            with self.lock:  # a fault thread stuck past the window may still append
                fired = sorted(self.injected, key=lambda f: f["at_s"])
            violations += fault_errors(fired)
            result = {
                "trial": self.plan.trial,
                "seed": self.plan.seed,
                "replay": self.plan.replay(),
                "faults": fired,
                "source": self.plan.source,
                "target": self.plan.target,
                "master": self.plan.master,
                "ok": not violations,
                "violations": violations,
                "notes": self.notes,
                "writer": self.writer.describe() if hasattr(self, "writer") else None,
                "seconds": round(time.monotonic() - started, 1),
            }
            try:
                self.cleanup()
            except Exception as exc:  # reported with the trial; the next one starts afresh
                log.exception("trial %d: cleanup failed", self.plan.trial)
                result["notes"].append(f"cleanup failed: {type(exc).__name__}: {exc}")
            (self.dir / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        return result


def fault_errors(fired: list[dict[str, Any]]) -> list[str]:
    """A fault tool that broke is a trial that did not run as planned: its fault neither landed nor
    was missed for want of a victim, so the trial cannot count as a clean one under that fault."""
    return [f"fault {f['kind']} at {f['at_s']}s: harness error {f['error']}" for f in fired if f.get("error")]


def _tail(run: Run, chars: int = 1500) -> str:
    return run.proc.stderr_text()[-chars:]
