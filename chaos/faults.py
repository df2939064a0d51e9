"""The fault kinds (:data:`chaos.plan.KINDS`), each a function of the running trial.

A fault waits for its victim when it has one (a reindex driver, a Python worker running a task),
injects, and says what it did; "missed" when no victim appeared in time (the campaign counts only
faults it injected). Faults run in threads of their own, so they overlap as the seed placed them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from chaos import procs
from chaos.plan import Fault

if TYPE_CHECKING:
    from chaos.trial import Run, TrialRun

VICTIM_WAIT_S = 45.0
#: drivers a driver fault tries before it counts as missed (each may end before the fault lands)
DRIVER_ATTEMPTS = 3
T = TypeVar("T")


class Missed(Exception):
    """The fault found nothing to hit (no victim appeared in time)."""


def inject(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """Inject *fault*; returns what was done (raises :class:`Missed`)."""
    return FAULTS[fault.kind](run, fault, rng)


def _poll(what: str, probe: Callable[[], T | None], timeout: float = VICTIM_WAIT_S) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)  # polling a condition with a deadline
    raise Missed(f"no {what} within {timeout:.0f} s")


def _driver(run: TrialRun) -> Run:
    """A running reindex driver; starts a rebuild when none runs (an operator reindexing again)."""
    found = run.live("reindex")
    if found is None:
        run.ensure_rebuild()
    return _poll("reindex driver", lambda: run.live("reindex"), 30)


def _phase(run: TrialRun, victim: Run) -> str:
    """Wait up to 30 s for a partition in progress; a driver still alive without one is planning
    or finalizing (catch-up, swap), a moment as worth hitting: the fault goes on there."""
    try:
        _poll("job partition in progress", run.partitions_running, 30)
        return "partitions in progress"
    except Missed:
        if not victim.alive():
            raise Missed(f"reindex pid {victim.proc.pid} ended before the fault's moment") from None
        return "no partition in progress: planning or finalizing"


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
    raise Missed("; ".join(ended))


def kill_driver(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    victim, phase = _driver_at_its_moment(run)
    victim.kill()
    return f"SIGKILL reindex pid {victim.proc.pid} and its group ({phase})"


def kill_sync(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    victim = _poll("sync process", lambda: run.live("sync"))
    victim.kill()
    return f"SIGKILL sync pid {victim.proc.pid} and its group"


def kill_executor(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    def executors() -> list[int]:
        return [j.pid for j in procs.spark_jvms() if j.role == "executor" and run.ours(j.pid)]

    pids = _poll("executor JVM", executors)
    pid = rng.choice(sorted(pids))
    procs.signal_pid(pid, signal.SIGKILL)
    return f"SIGKILL executor JVM pid {pid}"


def kill_python_worker(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    _driver(run)

    def workers() -> list[int]:
        return [pid for pid in procs.python_workers() if run.ours(pid)]

    pids = _poll("Python worker", workers)
    pid = sorted(pids)[0 if fault.params.get("victim") == "first" else -1]
    procs.signal_pid(pid, signal.SIGKILL)
    return f"SIGKILL Python worker pid {pid}"


def stop_driver(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    """The driver frozen (a VM paused, a GC pause) past its lock's lease, while another driver
    takes the job over; then it wakes up and must find it is fenced off."""
    gone: list[str] = []
    for _ in range(DRIVER_ATTEMPTS):
        victim, phase = _driver_at_its_moment(run)
        run_before = run.job_run_id()
        try:  # the driver may end (its job done, another fault) between the poll and the signal
            group = os.getpgid(victim.proc.pid)
            os.killpg(group, signal.SIGSTOP)
            break
        except ProcessLookupError:
            gone.append(f"reindex pid {victim.proc.pid} ended before it could be frozen")
    else:
        raise Missed("; ".join(gone))
    victim.frozen = True
    try:
        time.sleep(run.lease_s * 1.5)  # the frozen driver's lease runs out: the fault's own duration
        second = run.start_reindex()
        try:
            _poll("takeover by the second driver", lambda: run.job_run_id() not in (None, run_before), 90)
            took = "another driver took the job over"
        except Missed:
            took = "no takeover seen within 90 s (the job may have ended)"
    finally:
        # a kill_driver that chose this driver before it froze may have killed the group meanwhile
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)
        victim.frozen = False
    return f"SIGSTOP reindex pid {victim.proc.pid} group ({phase}); {took} (pid {second.proc.pid}); SIGCONT"


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
    proxy = run.http_proxy
    assert proxy is not None
    p = fault.params
    proxy.fail_next(429, count=int(p["status429"]), path="_bulk")
    proxy.fail_next(503, count=int(p["status503"]), path="_bulk")
    proxy.drop_next(count=int(p["drops"]))
    return f"target: next bulks {p['status429']}x 429, {p['status503']}x 503; {p['drops']} connections dropped"


def drop_slot(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    slots = _poll("replication slot", lambda: run.pg.slots(run.source_db))
    name = rng.choice(sorted(s[0] for s in slots))
    run.pg.drop_slot(name)
    return f"slot {name} dropped by hand"


def purge_binlogs(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    assert run.maria is not None
    run.maria.purge_binlogs()
    return "binlogs purged up to the newest file"


def fill_disk(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    assert run.disk is not None
    seconds = float(fault.params["seconds"])
    run.disk.fill()
    try:
        time.sleep(seconds)  # how long the disk stays full: the fault's own duration
    finally:
        run.disk.free()
    return f"Tantivy disk full for {seconds} s"


def clock_jump(run: TrialRun, fault: Fault, rng: random.Random) -> str:
    assert run.clock is not None
    seconds = float(fault.params["seconds"])
    run.clock.jump(seconds)
    return f"wall clock of {run.plan.clock_victim} jumped {seconds:+.0f} s"


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
