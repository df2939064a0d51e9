"""What must hold at the end of every trial, whatever the faults were.

1. ``verify`` of every alias: 0 missing, 0 extra, 0 stale, 0 duplicates;
2. no partition completed twice, read from a history the store itself keeps: a trigger the
   campaign installs on the partition table logs every status change (our code cannot skip it);
3. no alias moved by a holder whose fence was stale (the store's log of swap attempts);
4. nothing left behind: replication slots other than the sync's, live holds, sync presence,
   unexpired locks, index versions beyond what ``keep_versions`` keeps;
5. no dead letters: the workload makes no row unbuildable;
6. every process ended with a documented exit code (0, 1, 3; 2 means a bad config, and the
   campaign's is good) and printed no Python traceback, unless the campaign killed it.

And one about the trial itself: the writer committed throughout, or nothing above was tested
under changes (:func:`writer_wrote`).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import sqlalchemy as sa

from sparkindex.capture.catch_up import catch_up_group
from sparkindex.config import load_pipeline
from sparkindex.coordination.base import store_now
from sparkindex.coordination.recovery import not_resumable
from sparkindex.coordination.states import JobStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.targets.registry import open_target

#: the consumer group a rebuild's catch-up keeps its position under (capture.catch_up)
CATCH_UP_PREFIX = catch_up_group("")

if TYPE_CHECKING:
    from chaos.trial import TrialRun

DOCUMENTED_EXITS = {0, 1, 3}
EXPECTED_ALIASES = ("products", "reviews")  # the trial's pipeline (chaos.trial.PIPELINE)
TRACEBACK = "Traceback (most recent call last)"

_HISTORY = [
    "CREATE TABLE IF NOT EXISTS chaos_partition_history (partition_id text NOT NULL, job_id text, "
    "old_status text, new_status text NOT NULL, claim_token bigint, owner text, at timestamptz NOT NULL)",
    """CREATE OR REPLACE FUNCTION chaos_log_partition() RETURNS trigger AS $$
    BEGIN
      IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO chaos_partition_history VALUES (NEW.id, NEW.job_id,
          CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.status END, NEW.status, NEW.claim_token, NEW.owner,
          clock_timestamp());
      END IF;
      RETURN NEW;
    END $$ LANGUAGE plpgsql""",
    "CREATE OR REPLACE TRIGGER chaos_partition_history AFTER INSERT OR UPDATE ON si_partition "
    "FOR EACH ROW EXECUTE FUNCTION chaos_log_partition()",
]


def install_partition_history(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            for statement in _HISTORY:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def check(run: TrialRun) -> list[str]:
    violations: list[str] = []
    for name, fn in (
        ("verify", verify_clean),
        ("partitions", completed_once),
        ("fences", fences_current),
        ("leftovers", nothing_left_behind),
        ("rebuild", rebuild_completed),
        ("dead letters", no_dead_letters),
        ("exits", documented_exits),
        ("writer", writer_wrote),
    ):
        try:
            violations += fn(run)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is a violation, never a pass
            violations.append(f"{name}: the check itself failed: {type(exc).__name__}: {exc}")
    return violations + [f"note: {n}" for n in run.notes]


def verify_clean(run: TrialRun) -> list[str]:
    cli = str(Path(sys.executable).with_name("sparkindex"))
    done = subprocess.run(
        [cli, "verify", "-c", str(run.pipeline), "--json"], capture_output=True, text=True, timeout=900, cwd=run.dir
    )
    (run.dir / "logs" / "verify.err").write_text(done.stderr, encoding="utf-8")
    lines = done.stdout.strip().splitlines()
    if not lines:
        return [f"verify exited {done.returncode} with no report: {done.stderr[-800:]}"]
    report = orjson.loads(lines[-1])
    out = []
    aliases = report.get("aliases", {})
    for alias in EXPECTED_ALIASES:  # a report that leaves an alias out, or checked nothing, proves nothing
        r = aliases.get(alias)
        if r is None:
            out.append(f"verify reported nothing on alias {alias!r}")
        elif not r.get("checked"):
            out.append(f"verify {alias}: nothing checked ({r})")
    for alias, r in sorted(aliases.items()):
        drift = {k: r[k] for k in ("missing", "extra", "stale", "duplicates") if r.get(k)}
        if drift:
            out.append(f"verify {alias}: {drift} of {r.get('checked')} checked")
    if done.returncode != 0 and not out:
        out.append(f"verify exited {done.returncode}: {done.stderr[-800:]}")
    return out


def completed_once(run: TrialRun) -> list[str]:
    engine = sa.create_engine(run.store_direct_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT partition_id, count(*) FROM chaos_partition_history WHERE new_status = 'COMPLETED' "
                    "GROUP BY partition_id HAVING count(*) > 1"
                )
            ).all()
    finally:
        engine.dispose()
    return [f"partition {pid} completed {n} times" for pid, n in rows]


def fences_current(run: TrialRun) -> list[str]:
    """Every move, and every attempt that may have moved (``pending``: the process ended before
    it recorded the outcome; ``error``: the answer never came), carried a current fence; and each
    alias points where the last attempt that may have moved it pointed it."""
    from sparkindex.coordination.swap_log import ERROR, MOVED, PENDING, stale_moves

    store = CoordinationStore(run.store_direct_url)
    try:
        attempts = store.swap_log.attempts()
    finally:
        store.close()
    maybe = [dataclasses.replace(a, outcome=MOVED) if a.outcome in (PENDING, ERROR) else a for a in attempts]
    unsure = {a.id: a.outcome for a in attempts if a.outcome in (PENDING, ERROR)}
    out = []
    for line in stale_moves(maybe):
        attempt_id = int(line.split(":", 1)[0].removeprefix("attempt "))
        prefix = f"stale fence ({unsure[attempt_id]}, may have moved)" if attempt_id in unsure else "stale fence"
        out.append(f"{prefix}: {line}")
    pipeline = load_pipeline(run.pipeline)
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    try:
        for alias in EXPECTED_ALIASES:
            movers = [a for a in maybe if a.alias == alias and a.outcome == MOVED]
            live = target.alias_target(alias)
            if not movers:
                out.append(f"alias {alias} points at {live}, and no swap attempt was recorded for it")
            elif not _explains(movers, live, unsure):
                last = movers[-1]
                out.append(
                    f"alias {alias} points at {live}, but the last recorded move (attempt {last.id}, fence "
                    f"{last.fence}) pointed it at {last.index}"
                )
    finally:
        target.close()
    return out


def _explains(movers: list[Any], live: str | None, unsure: dict[int, str]) -> bool:
    """Whether the moves, latest first, leave the alias at *live*: the latest that pointed it
    there comes before any later move that surely happened elsewhere."""
    for a in reversed(movers):
        if a.index == live:
            return True
        if a.id not in unsure:
            return False
    return False


def nothing_left_behind(run: TrialRun) -> list[str]:
    out: list[str] = []
    pipeline = load_pipeline(run.pipeline)
    aliases = [i.alias for i in pipeline.indexes]
    if run.plan.source == "postgres":
        from sparkindex.sources.postgres.slots import slot_name

        own = slot_name(pipeline.sync.slot, run.source_db, pipeline.slot_namespace(), pipeline.sync.group)
        for name, _db, active in run.pg.slots(run.source_db):
            if name != own:
                out.append(f"replication slot {name} left behind (active={active}); the sync's is {own}")
    store = CoordinationStore(run.store_direct_url, pipeline.coordination.prefix)
    try:
        for alias, hold in store.sync_holds.holds(aliases).items():
            out.append(f"hold on {alias} left behind: {hold}")
        for presence in store.sync_holds.presence(aliases):
            out.append(f"sync presence left behind: {presence}")
        with store.engine.connect() as conn:
            # leases are on the store's clock (a clock_jump fault moves the harness's too)
            locks = conn.execute(
                sa.text("SELECT lock_key, holder FROM si_lock WHERE expires_at > :now"), {"now": store_now(conn)}
            )
            out += [f"lock {key} left behind, held by {holder}" for key, holder in locks]
            claimed = conn.execute(
                sa.text("SELECT job_id, entity, partition_index FROM si_partition WHERE status = 'PROCESSING'")
            )
            out += [f"partition {entity}#{n} of job {job} left PROCESSING" for job, entity, n in claimed]
        out += left_unfinished(store)
    finally:
        store.close()
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    try:
        for alias in aliases:
            versions = target.list_versions(alias)
            live = target.alias_target(alias)
            if live not in versions:
                out.append(f"alias {alias} points at {live}, not one of its versions {versions}")
            if len(versions) > pipeline.job.keep_versions:
                out.append(
                    f"alias {alias}: {len(versions)} versions kept, keep_versions is {pipeline.job.keep_versions}"
                )
    finally:
        target.close()
    return out


def left_unfinished(store: CoordinationStore) -> list[str]:
    """Jobs nobody will finish, and catch-up positions of jobs that ended: once every process of
    the trial has exited and the last rebuild completed, recovery (or the job itself) must have
    settled every one of them, or they hold a log position (a slot's WAL) for ever."""
    out: list[str] = []
    jobs = store.job_rows.jobs()
    live = (JobStatus.INITIALIZING, JobStatus.READY, JobStatus.RUNNING, JobStatus.STOPPING)
    out += [f"job {j.id} left {j.status}" for j in jobs if j.status in live]
    done = (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS)
    ended = {j.id for j in jobs if j.status in done or not_resumable(j)}
    for held in store.offsets.every_group():
        job_id = held.group.removeprefix(CATCH_UP_PREFIX)
        if held.group.startswith(CATCH_UP_PREFIX) and job_id in ended:
            out.append(f"catch-up position of ended job {job_id} left behind ({held.alias} at {held.position})")
    return out


def rebuild_completed(run: TrialRun) -> list[str]:
    """The trial's last rebuild completed: verify alone cannot tell, as the aliases still point at
    an older version that the sync kept current while a failed rebuild waits for a rerun. "Last"
    is the newest reindex run the trial started, and its job is the one it reported: the jobs'
    ``created_at`` is the writer's wall clock, which a clock_jump fault moves back."""
    reindexes = [r for r in run.runs if r.role == "reindex"]
    if not reindexes:
        return ["no reindex ran: the trial rebuilt nothing"]
    last = reindexes[-1]
    what = f"the last rebuild (reindex pid {last.proc.pid})"
    if last.proc.returncode != 0:
        return [f"{what} exited {last.proc.returncode}"]
    reports = [line for line in last.proc.stdout_text().splitlines() if line.startswith("{")]
    if not reports:
        return [f"{what} reported no job: {last.proc.stderr_text()[-400:]}"]
    job_id = str(orjson.loads(reports[-1]).get("job_id"))
    store = CoordinationStore(run.store_direct_url)
    try:
        job = store.job_rows.job(job_id)
    finally:
        store.close()
    return [] if job.status == JobStatus.COMPLETED else [f"{what}: its job {job_id} is {job.status}"]


def no_dead_letters(run: TrialRun) -> list[str]:
    store = CoordinationStore(run.store_direct_url)
    try:
        n = store.dead_letters.count_matching()
        letters = store.dead_letters.list() if n else []
    finally:
        store.close()
    return [f"dead letter {d.alias}/{d.doc_id}: {d.error_class}: {d.error_message[:200]}" for d in letters[:10]] + (
        [f"... {n - 10} more dead letters"] if n > 10 else []
    )


def documented_exits(run: TrialRun) -> list[str]:
    out = []
    for r in run.runs:
        if r.proc.returncode is None:
            out.append(f"{r.role} pid {r.proc.pid} had not exited when the trial ended")
            continue
        code = r.proc.returncode
        if not r.killed and code not in DOCUMENTED_EXITS:
            out.append(f"{r.role} pid {r.proc.pid} exited {code}: {r.proc.stderr_text()[-600:]}")
        # a killed run's exit is the kill's, but what it printed before the kill is its own
        err = r.proc.stderr_text()
        if TRACEBACK in err:
            at = err.index(TRACEBACK)
            out.append(f"{r.role} pid {r.proc.pid} printed a traceback: {err[at : at + 1200]}")
    return out


def writer_wrote(run: TrialRun) -> list[str]:
    """The writer lived through the window and committed: a trial without changes proves nothing
    about the sync or the catch-up, whatever the other invariants say."""
    writer = run.writer
    out = []
    if writer.failure is not None:
        out.append(f"the writer died: {writer.failure} (after {writer.committed} commits)")
    if writer.is_alive():
        out.append("the writer did not stop when told to")
    if writer.committed == 0:
        out.append(f"the writer committed nothing ({writer.errors} errors)")
    return out
