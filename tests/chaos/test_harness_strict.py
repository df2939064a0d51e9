"""What a cold review of the campaign found it could not see, each planted here and caught: an older
rebuild's success taken for the newer one's, a failed last rebuild, a fault that went again after it
had acted, a clock jump or target errors that landed on nothing, tracebacks printed before a kill.

Pure unit tests: fake runs and processes, a SQLite store. No database server, no target, no Spark.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from chaos.plan import Fault
from chaos.trial import Run, TrialRun

from chaos import faults, invariants
from chaos import trial as trial_module
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from tests.chaos.test_harness_honesty import FakeRun, _trial


class FakeProc:
    """A process whose exit the test decides (what :class:`Run` and the invariants read)."""

    def __init__(self, pid: int, returncode: int | None = None, stderr: str = "", stdout: str = "") -> None:
        self.pid, self.returncode, self.stderr, self.stdout = pid, returncode, stderr, stdout

    def poll(self) -> int | None:
        return self.returncode

    def stderr_text(self) -> str:
        return self.stderr

    def stdout_text(self) -> str:
        return self.stdout


def _supervising_trial(runs: list[Run]) -> tuple[TrialRun, list[Run]]:
    trial = object.__new__(TrialRun)
    trial.runs = runs
    trial.lock = threading.Lock()
    trial.rebuild_lock = threading.Lock()
    trial.rebuild_done = False
    trial.rebuild_runs = len(runs)
    trial.rebuild_failures, trial.rerun_at = 0, None
    trial.finishing = True  # no sync to restart here
    trial.notes = []
    started: list[Run] = []

    def start_reindex() -> Run:
        run = Run("reindex", FakeProc(1000 + len(started)))  # type: ignore[arg-type]
        started.append(run)
        trial.runs.append(run)
        return run

    trial.start_reindex = start_reindex  # type: ignore[method-assign]
    return trial, started


# -- the rebuild that ends the window is the newest one ------------------------------------------------
def test_an_older_rebuild_succeeding_does_not_mark_a_newer_one_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_module, "REBUILD_BACKOFF_S", (0.0,))  # a rerun as soon as it is due
    older = Run("reindex", FakeProc(1, returncode=0))  # type: ignore[arg-type]  # succeeded...
    newer = Run("reindex", FakeProc(2))  # type: ignore[arg-type]  # ...after a fault started this one
    trial, started = _supervising_trial([older, newer])
    trial._supervise()
    assert trial.rebuild_done is False and started == []
    newer.proc.returncode = 1  # type: ignore[misc]  # the newer one fails: it must be rerun
    trial._supervise()
    assert trial.rebuild_done is False and len(started) == 1
    started[0].proc.returncode = 0  # type: ignore[misc]
    trial._supervise()
    assert trial.rebuild_done is True


def test_reruns_of_a_rebuild_that_fails_at_once_are_paced() -> None:
    """A rebuild failing at once (exit 3 while the disk is full) was rerun at once, and spent every
    rerun the trial allows inside a 12 s fault (seen in a campaign trial). Reruns in a
    row wait longer each time; a success starts the count again."""
    first = Run("reindex", FakeProc(1, returncode=3))  # type: ignore[arg-type]
    trial, started = _supervising_trial([first])
    waits = []
    for _ in range(len(trial_module.REBUILD_BACKOFF_S) + 1):
        trial._supervise()  # the failure is seen: a rerun is due later, none starts now
        assert trial.rerun_at is not None and len(started) == len(waits)
        waits.append(round(trial.rerun_at - time.monotonic()))
        trial.rerun_at = time.monotonic() - 0.01  # its wait has passed
        trial.rebuild_runs = 0  # not the run cap under test here
        trial._supervise()
        assert len(started) == len(waits)
        started[-1].proc.returncode = 3  # type: ignore[misc]  # fails at once again
    assert waits == [*trial_module.REBUILD_BACKOFF_S, trial_module.REBUILD_BACKOFF_S[-1]]
    started[-1].proc.returncode = None  # type: ignore[misc]
    trial._supervise()
    started[-1].proc.returncode = 0  # type: ignore[misc]
    trial._supervise()
    assert trial.rebuild_done and trial.rebuild_failures == 0 and trial.rerun_at is None


def test_a_due_rerun_starts_no_second_rebuild_beside_a_frozen_one() -> None:
    """A fault may start a rebuild (and freeze it) while a rerun is due: the rerun must not put a
    second driver beside the frozen one, and the fault's run stands for the rerun."""
    failed = Run("reindex", FakeProc(1, returncode=3))  # type: ignore[arg-type]
    trial, started = _supervising_trial([failed])
    trial._supervise()
    assert trial.rerun_at is not None and started == []
    trial.ensure_rebuild()  # a stop_driver fault needs a driver: it starts one at once...
    assert len(started) == 1 and trial.rerun_at is None, "...and that run is the rerun that was due"
    started[0].frozen = True  # ...and freezes it
    trial.rerun_at = time.monotonic() - 0.01  # were a rerun still due, it would start now
    trial._supervise()
    assert len(started) == 1, "a second rebuild beside the frozen one"


def test_a_due_rerun_respects_the_run_cap() -> None:
    failed = Run("reindex", FakeProc(1, returncode=3))  # type: ignore[arg-type]
    trial, started = _supervising_trial([failed])
    trial._supervise()
    trial.rebuild_runs = trial_module.REBUILD_RUNS  # faults started runs while the rerun waited
    trial.rerun_at = time.monotonic() - 0.01
    trial._supervise()
    assert started == [] and trial.rebuild_done and "still unfinished" in trial.notes[-1]


def test_the_last_rebuild_failed_is_a_violation_whatever_the_jobs_clocks_say(tmp_path: Path) -> None:
    """The newest rebuild is the trial's newest reindex run, not the newest ``created_at``: in
    a campaign trial a clock jumped 40 s back made the completed rebuild look older than the
    failed one before it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = CoordinationStore(url)
    failed = store.job_rows.create_job(["products", "reviews"], {}, "r1")
    done = store.job_rows.create_job(["products", "reviews"], {}, "r2")
    job = store.t.job
    with store.engine.begin() as conn:
        conn.execute(sa.update(job).where(job.c.id == failed.id).values(status=str(JobStatus.FAILED), created_at=2.0))
        conn.execute(sa.update(job).where(job.c.id == done.id).values(status=str(JobStatus.COMPLETED), created_at=1.0))
    first = Run("reindex", FakeProc(1, 3, stdout=f'{{"job_id": "{failed.id}", "status": "FAILED"}}'))  # type: ignore[arg-type]
    last = Run("reindex", FakeProc(2, 0, stdout=f'{{"job_id": "{done.id}", "status": "COMPLETED"}}'))  # type: ignore[arg-type]
    run: Any = type("Run", (), {"store_direct_url": url, "runs": [first, last]})()
    assert invariants.rebuild_completed(run) == []
    run.runs = [last, first]  # the failed one last
    assert invariants.rebuild_completed(run) == ["the last rebuild (reindex pid 1) exited 3"]
    with store.engine.begin() as conn:  # exit 0, but its job did not complete
        conn.execute(sa.update(job).where(job.c.id == done.id).values(status=str(JobStatus.FAILED)))
    store.close()
    run.runs = [first, last]
    assert invariants.rebuild_completed(run) == [f"the last rebuild (reindex pid 2): its job {done.id} is FAILED"]


# -- a fault goes again only when it did nothing --------------------------------------------------------
def test_a_fault_that_acted_before_it_missed_does_not_go_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tries: list[int] = []

    def froze_but_nobody_took_over(run: Any, fault: Fault, rng: random.Random) -> str:
        tries.append(1)
        raise faults.Missed("SIGSTOP reindex pid 7 group; no takeover of run r1 seen; SIGCONT", again=False)

    result = _trial(tmp_path, monkeypatch, froze_but_nobody_took_over)
    assert len(tries) == 1
    assert result["faults"][0]["missed"] == "SIGSTOP reindex pid 7 group; no takeover of run r1 seen; SIGCONT"


def test_a_clock_jump_with_no_victim_alive_lands_on_nothing() -> None:
    jumped: list[float] = []
    run: Any = FakeRun([])  # no process of the victim's role runs
    run.clock = type("Clock", (), {"jump": lambda self, s: jumped.append(s)})()
    run.plan = type("Plan", (), {"clock_victim": "sync"})()
    run.stopping.set()  # the window closed while the fault waited for one
    with pytest.raises(faults.Missed, match="sync process"):
        faults.clock_jump(run, Fault("clock_jump", 1.0, {"seconds": 90.0}), random.Random(0))
    assert jumped == []


class FakeRule:
    def __init__(self, count: int) -> None:
        self.count = count


class FakeProxy:
    """Arms rules as the HTTP fault proxy does; *met* of them are used up by requests."""

    def __init__(self, met: int) -> None:
        self.met = met
        self.rules: list[FakeRule] = []

    def _arm(self, count: int) -> FakeRule:
        rule = FakeRule(count)
        used = min(self.met, count)
        rule.count -= used
        self.met -= used
        self.rules.append(rule)
        return rule

    def fail_next(self, status: int, count: int = 1, path: str = "") -> FakeRule:
        return self._arm(count)

    def drop_next(self, count: int = 1, path: str = "") -> FakeRule:
        return self._arm(count)


TARGET_ERRORS = Fault("target_errors", 1.0, {"status429": 2, "status503": 1, "drops": 1})


def test_target_errors_count_only_once_a_request_met_them() -> None:
    run: Any = FakeRun([])
    run.http_proxy = FakeProxy(met=1)
    did = faults.target_errors(run, TARGET_ERRORS, random.Random(0))
    assert did.endswith("(1 met when counted)")


def test_target_errors_nobody_met_are_missed_and_not_armed_again() -> None:
    run: Any = FakeRun([])
    run.http_proxy = FakeProxy(met=0)
    run.stopping.set()
    with pytest.raises(faults.Missed) as missed:
        faults.target_errors(run, TARGET_ERRORS, random.Random(0))
    assert missed.value.again is False and len(run.http_proxy.rules) == 3


# -- every process of the trial is judged on what it printed -----------------------------------------------
def test_a_traceback_printed_before_a_kill_and_a_run_still_going_are_violations() -> None:
    killed = Run("sync", FakeProc(11, returncode=-9, stderr="Traceback (most recent call last):\n  boom"))  # type: ignore[arg-type]
    killed.killed = True
    going = Run("reindex", FakeProc(12))  # type: ignore[arg-type]
    quiet = Run("reindex", FakeProc(13, returncode=-9))  # type: ignore[arg-type]
    quiet.killed = True
    run: Any = type("Run", (), {"runs": [killed, going, quiet]})()
    found = invariants.documented_exits(run)
    assert found[0].startswith("sync pid 11 printed a traceback: Traceback (most recent call last):")
    assert found[1:] == ["reindex pid 12 had not exited when the trial ended"]


# -- a fault on a server another fault is restarting waits for it -----------------------------------------
class RestartingPg:
    """PostgreSQL as a slot drop meets it right after a restart_postgres: recovering, then up."""

    def __init__(self, down_for: int) -> None:
        self.down_for = down_for
        self.dropped: list[str] = []

    def _answer(self) -> None:
        if self.down_for > 0:
            self.down_for -= 1
            raise psycopg.OperationalError("FATAL:  the database system is not yet accepting connections")

    def slots(self, database: str | None = None) -> list[tuple[str, str, bool]]:
        self._answer()
        return [("chaos_slot", "chaos_src", True)]

    def drop_slot(self, name: str) -> bool:
        self._answer()
        self.dropped.append(name)
        return True


def test_a_slot_drop_during_a_restart_waits_for_the_server_and_lands() -> None:
    """Seed 1 trial 22 on 18075d2: the drop met PostgreSQL still recovering from a restart fault,
    and the tool's error failed the trial."""
    run: Any = FakeRun([])
    run.pg, run.source_db = RestartingPg(down_for=2), "chaos_src"
    assert faults.drop_slot(run, Fault("drop_slot", 1.0), random.Random(0)) == "slot chaos_slot dropped by hand"
    assert run.pg.dropped == ["chaos_slot"]


def test_a_server_that_stays_down_is_a_miss_not_a_harness_error() -> None:
    run: Any = FakeRun([])
    run.pg, run.source_db = RestartingPg(down_for=10**6), "chaos_src"
    run.stopping.set()  # the window closed while the server was still down
    with pytest.raises(faults.Missed, match="out of reach for listing slots"):
        faults.drop_slot(run, Fault("drop_slot", 1.0), random.Random(0))
