"""The fault kinds (:data:`chaos.plan.KINDS`), each a function of the running trial.

A fault waits for its victim when it has one (a reindex driver, a Python worker running a task),
injects, and says what it did; "missed" when no victim appeared in time, or when the signal found
its victim gone (the campaign counts only faults it injected: a fault that did not land must never
be counted as one that did). Faults run in threads of their own, so they overlap as the seed placed
them; every wait of theirs ends early when the trial's window closes (``run.stopping``).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import MySQLdb  # type: ignore[import-untyped]  # no stubs in the venv
import psycopg

from chaos import procs
from chaos.plan import Fault

if TYPE_CHECKING:
    from chaos.trial import Run, TrialRun

VICTIM_WAIT_S = 45.0
#: drivers a driver fault tries before it counts as missed (each may end before the fault lands)
DRIVER_ATTEMPTS = 3
TAKEOVER_WAIT_S = 90.0  # how long a frozen driver's fault waits for another run to take its job over
T = TypeVar("T")


class Missed(Exception):
    """The fault found nothing to hit (no victim appeared in time). *again* says whether it may go
    again: not when it did something before it missed (a driver frozen past its lease that nobody
    took over from), whose second go would act on the first one's aftermath."""

    def __init__(self, reason: str, *, again: bool = True) -> None:
        super().__init__(reason)
        self.again = again


def inject(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """Inject *fault*; returns what was done (raises :class:`Missed`)."""
    return FAULTS[fault.kind](run, fault, rng)


def _poll(run: TrialRun, what: str, probe: Callable[[], T | None], timeout: float = VICTIM_WAIT_S) -> T:
    """*probe*'s first truthy answer; :class:`Missed` after *timeout*, or at once when the window
    closes (a fault still waiting then would land during the finish, unrecorded by its moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        if run.stopping.wait(0.2):  # the polling pace, cut short when the window closes
            raise Missed(f"the window closed while waiting for a {what}")
    raise Missed(f"no {what} within {timeout:.0f} s")


def _driver(run: TrialRun) -> Run:
    """A running reindex driver; starts a rebuild when none runs (an operator reindexing again)."""
    found = run.live("reindex")
    if found is None:
        run.ensure_rebuild()
    return _poll(run, "reindex driver", lambda: run.live("reindex"), 30)


def _phase(run: TrialRun, victim: Run) -> str:
    """Wait up to 30 s for a partition in progress; a driver still alive without one is planning
    or finalizing (catch-up, swap), a moment as worth hitting: the fault goes on there. The victim
    is checked on both paths: the partitions seen may be another driver's, and a victim that died
    while we waited would otherwise be "hit" after its own crash, which the kill would then mask."""
    try:
        _poll(run, "job partition in progress", run.partitions_running, 30)
        phase = "partitions in progress"
    except Missed:
        if run.stopping.is_set():
            raise
        phase = "no partition in progress: planning or finalizing"
    if not victim.alive():
        raise Missed(f"reindex pid {victim.proc.pid} ended before the fault's moment")
    return phase


def _driver_at_its_moment(run: TrialRun) -> tuple[Run, str]:
    """A live driver at a moment worth hitting. Another fault (kill_driver and stop_driver may pick
    the same driver) or the job's own end can take the chosen one first: then the next rebuild's
    driver is the victim, as an operator reindexing again would start one."""
    ended: list[str] = []
    for _ in range(DRIVER_ATTEMPTS):
        victim = _driver(run)
        try:
            return victim, _phase(run, victim)
        except Missed as exc:
            ended.append(str(exc))
            if run.stopping.is_set():
                break
    raise Missed("; ".join(ended))


def kill_driver(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """A driver that ended between the moment and the signal is a miss, never a hit: marked killed,
    its own exit (a crash, a traceback) would escape :func:`chaos.invariants.documented_exits`."""
    victim, phase = _driver_at_its_moment(run)
    if not victim.kill():
        raise Missed(f"reindex pid {victim.proc.pid} ended before the signal (exit {victim.proc.returncode})")
    return f"SIGKILL reindex pid {victim.proc.pid} and its group ({phase})"


def kill_sync(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """As :func:`kill_driver`: a sync that ended on its own is not one the fault killed."""
    victim = _poll(run, "sync process", lambda: run.live("sync"))
    if not victim.kill():
        raise Missed(f"sync pid {victim.proc.pid} ended before the signal (exit {victim.proc.returncode})")
    return f"SIGKILL sync pid {victim.proc.pid} and its group"


#: victim lists a process fault reads before it counts as missed (a victim may vanish meanwhile)
PROCESS_ATTEMPTS = 2


def _kill_one(run: TrialRun, what: str, find: Callable[[], list[int]], choose: Callable[[list[int]], int]) -> int:
    """SIGKILL one of *find*'s processes; a victim gone before the signal (its task ended, another
    fault took its executor) sends the fault back to a fresh list once, then it is missed."""
    gone: list[str] = []
    for _ in range(PROCESS_ATTEMPTS):
        pid = choose(sorted(_poll(run, what, find)))
        if procs.signal_pid(pid, signal.SIGKILL):
            return pid
        gone.append(f"{what} pid {pid} was gone before the signal")
    raise Missed("; ".join(gone))


def kill_executor(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    def executors() -> list[int]:
        return [j.pid for j in procs.spark_jvms() if j.role == "executor" and run.ours(j.pid)]

    pid = _kill_one(run, "executor JVM", executors, rng.choice)
    return f"SIGKILL executor JVM pid {pid}"


def kill_python_worker(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    _driver(run)

    def workers() -> list[int]:
        return [pid for pid in procs.python_workers() if run.ours(pid)]

    index = 0 if fault.params.get("victim") == "first" else -1
    pid = _kill_one(run, "Python worker", workers, lambda pids: pids[index])
    return f"SIGKILL Python worker pid {pid}"


def stop_driver(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """The driver frozen (a VM paused, a GC pause) past its lock's lease, while another driver
    takes the job over; then it wakes up and must find it is fenced off.

    The fault is this whole story, so it counts as injected only when another run took a lock
    the frozen driver held: a freeze that nobody took over from proves nothing about fencing.
    The victim's locks are read once it is frozen (it can take no more), by its pid in their
    holder names, never by the job's run id, which may be a dead driver's. A victim frozen before
    it held any lock (still starting) is resumed at once and another is tried. The group is
    signalled by the victim's own pid (``start_new_session``: the group id is the pid), checked
    alive first, rather than looked up from a pid that may be gone."""
    gone: list[str] = []
    for _ in range(DRIVER_ATTEMPTS):
        victim, phase = _driver_at_its_moment(run)
        if not victim.alive():
            gone.append(f"reindex pid {victim.proc.pid} ended before it could be frozen")
            continue
        try:  # the driver may still end (its job done, another fault) between the check and the signal
            os.killpg(victim.proc.pid, signal.SIGSTOP)
        except ProcessLookupError:
            gone.append(f"reindex pid {victim.proc.pid} ended before it could be frozen")
            continue
        held = _locks_of(run.alias_locks(), victim.proc.pid)
        if held:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.proc.pid, signal.SIGCONT)
        gone.append(f"reindex pid {victim.proc.pid} held no alias lock when frozen (resumed at once)")
    else:
        raise Missed("; ".join(gone))
    victim.frozen = True
    frozen_at = time.monotonic()

    def taken_over() -> str | None:
        """Locks the frozen driver held whose token grew: another run took them, which is what
        fences the frozen one off, whether that run then resumed the job or abandoned it for a
        new one, and whether or not its job has ended since (the lock row stays)."""
        now = run.alias_locks()
        taken = [f"{key} by {now[key][1]}" for key, token in sorted(held.items()) if key in now and now[key][0] > token]
        return ", ".join(taken) or None

    took: str | None = None
    second: Run | None = None
    waits: list[str] = []
    try:
        # the frozen driver's lease runs out: the fault's own duration (cut short if the window closes)
        if not run.stopping.wait(run.lease_s * 1.5):
            second = run.start_reindex()
            with contextlib.suppress(Missed):  # told below, once the victim runs again
                took = _poll(run, "takeover by another driver", taken_over, TAKEOVER_WAIT_S)
            if took is None:  # read while the victim is still frozen: what the other runs wait on
                waits = run.server_waits()
    finally:
        # a kill_driver that chose this driver before it froze may have killed the group meanwhile
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.proc.pid, signal.SIGCONT)
        victim.frozen = False
    what = f"SIGSTOP reindex pid {victim.proc.pid} group ({phase}), holding {', '.join(sorted(held))}"
    if took is None:
        if second is None:
            started = "no second driver started (the window closed)"
        else:
            started = "reindexes since the freeze: " + "; ".join(run.reindexes_since(frozen_at))
        if waits:
            started += "; waiting on the server: " + "; ".join(waits)
        raise Missed(f"{what}; no takeover of its locks seen ({started}); SIGCONT", again=False)
    assert second is not None
    return f"{what}; taken: {took} (a second driver started: pid {second.proc.pid}); SIGCONT"


def _locks_of(locks: dict[str, tuple[int, str]], pid: int) -> dict[str, int]:
    """The tokens of the locks whose holder is process *pid* (holder names are host:pid:run)."""
    return {key: token for key, (token, holder) in locks.items() if holder.rsplit(":", 2)[1:2] == [str(pid)]}


def restart_postgres(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    started = time.monotonic()
    run.pg.restart_immediate()
    return f"PostgreSQL restarted (immediate), down {time.monotonic() - started:.1f} s"


def restart_mariadb(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    assert run.maria is not None
    started = time.monotonic()
    run.maria.restart_immediate()
    return f"MariaDB restarted (SIGKILL), down {time.monotonic() - started:.1f} s"


def cut_store(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    seconds = float(fault.params["seconds"])
    run.store_cut.cut(seconds)
    return f"store black-holed for {seconds} s"


def cut_target(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    assert run.target_cut is not None
    seconds = float(fault.params["seconds"])
    run.target_cut.cut(seconds)
    return f"target black-holed for {seconds} s"


def target_errors(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """Injected once a request met one of its rules, not when they are armed: rules nobody met
    prove nothing, and what is left of them is cleared when the window closes."""
    proxy = run.http_proxy
    assert proxy is not None
    p = fault.params
    planned = {"429": int(p["status429"]), "503": int(p["status503"]), "drop": int(p["drops"])}
    rules = {
        "429": proxy.fail_next(429, count=planned["429"], path="_bulk"),
        "503": proxy.fail_next(503, count=planned["503"], path="_bulk"),
        "drop": proxy.drop_next(count=planned["drop"]),
    }

    def met() -> int:
        return sum(planned[k] - rules[k].count for k in rules)

    try:
        _poll(run, "request meeting the target's errors", met)
    except Missed as exc:  # armed already: a second go would arm a second set over the first
        raise Missed(str(exc), again=False) from None
    return (
        f"target: next bulks {planned['429']}x 429, {planned['503']}x 503; {planned['drop']} connections "
        f"dropped ({met()} met when counted)"
    )


#: what a server restarting under another fault (restart_postgres, restart_mariadb) answers meanwhile
SERVER_DOWN = (psycopg.OperationalError, MySQLdb.OperationalError)


def _through_restarts(run: TrialRun, what: str, act: Callable[[], T]) -> T:
    """*act* on a server that another fault may be restarting: while it is down or still
    recovering, *act* goes again, for as long as a victim is waited for (a campaign trial once had a slot
    drop met PostgreSQL "not yet accepting connections" and the tool's error failed the trial)."""
    deadline = time.monotonic() + VICTIM_WAIT_S
    while True:
        try:
            return act()
        except SERVER_DOWN as exc:
            if time.monotonic() > deadline:
                raise Missed(f"the server stayed out of reach for {what}: {exc}") from None
            if run.stopping.wait(0.5):  # the pace of the retries, cut short when the window closes
                raise Missed(f"the window closed while the server was out of reach for {what}") from None


def drop_slot(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    def listed() -> list[tuple[str, str, bool]]:
        return _through_restarts(run, "listing slots", lambda: run.pg.slots(run.source_db))

    slots = _poll(run, "replication slot", listed)
    name = rng.choice(sorted(s[0] for s in slots))
    if not _through_restarts(run, f"dropping slot {name}", lambda: run.pg.drop_slot(name)):
        raise Missed(f"slot {name} was gone before it could be dropped")
    return f"slot {name} dropped by hand"


def purge_binlogs(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    maria = run.maria
    assert maria is not None
    _through_restarts(run, "purging binlogs", maria.purge_binlogs)
    return "binlogs purged up to the newest file"


def fill_disk(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    assert run.disk is not None
    seconds = float(fault.params["seconds"])
    run.disk.fill()
    started = time.monotonic()
    try:
        run.stopping.wait(seconds)  # how long the disk stays full: the fault's own duration
    finally:
        run.disk.free()
    # the real duration: a window that closed meanwhile cut it short
    return f"Tantivy disk full for {time.monotonic() - started:.1f} s (planned {seconds} s)"


def clock_jump(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """A jump with no process of the victim's role alive would land on nothing: it waits for one
    (a reindex is started when none runs, as for the other driver faults)."""
    assert run.clock is not None and run.plan.clock_victim is not None
    role = run.plan.clock_victim
    if role == "reindex":
        victim = _driver(run)
    else:
        victim = _poll(run, f"{role} process (the clock's victim)", lambda: run.live(role))
    seconds = float(fault.params["seconds"])
    run.clock.jump(seconds)
    return f"wall clock of {role} pid {victim.proc.pid} jumped {seconds:+.0f} s"


FAULTS: dict[str, Callable[[TrialRun, Fault, random.Random], str]] = {
    "kill_driver": kill_driver,
    "kill_executor": kill_executor,
    "kill_python_worker": kill_python_worker,
    "kill_sync": kill_sync,
    "stop_driver": stop_driver,
    "restart_postgres": restart_postgres,
    "restart_mariadb": restart_mariadb,
    "cut_store": cut_store,
    "cut_target": cut_target,
    "target_errors": target_errors,
    "drop_slot": drop_slot,
    "purge_binlogs": purge_binlogs,
    "fill_disk": fill_disk,
    "clock_jump": clock_jump,
}
