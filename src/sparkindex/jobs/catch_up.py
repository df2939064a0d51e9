"""Guarantee 6: changes committed while a full reindex runs are in the new index when the alias moves.

search-center's "floating garbage" step, made exact with the change log (log replay after the
snapshot, re-reading rows by key; not DBLog's watermarks):

1. Before the partitions are planned, the log position P0 is recorded for the aliases being
   rebuilt (on PostgreSQL a slot of the job's own is created: its consistent point is P0, and it
   keeps the WAL from there). Every partition reads after P0, so whatever committed before P0 is in
   what the partitions read, and whatever committed after it is in the log.
2. After the last partition (and the count check), every change since P0 is replayed into the new
   versions, in rounds, until a round had little left (``sync.catch_up_lag_s``).
3. Live syncs of the aliases are asked to pause (a hold in the store; each running sync answers
   with the position it had applied), the consumer group the sync will continue with is made sure
   to exist (its slot created), and a last round replays up to the head: the new versions now hold
   every change up to a position Pc that is at or past every paused sync's.
4. The alias is swapped (fenced, by finalize). Each live group's offset for the alias moves to Pc
   on the new version, the holds are released, and the syncs continue from there: nothing between
   is lost, nothing is applied to the new version by two writers at once.

Only pipelines that sync (a ``sync:`` section, or ``changes:`` on an index) are caught up, so a
reindex of a database without change capture never creates server-side state.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from sparkindex.changes.consumer_offsets import open_consumer_offsets
from sparkindex.changes.fanout import FanOut
from sparkindex.changes.runner import SyncRun, sync_lock_key
from sparkindex.changes.session import resolve_consumer_plan, watched_tables
from sparkindex.changes.source import ChangeSource, open_change_source
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import OffsetStore
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import PermanentError, TransientError
from sparkindex.sources.base import Source
from sparkindex.targets.registry import open_target

log = logging.getLogger(__name__)

#: Rounds before the live syncs are paused for the last one, at most; and how much shorter a
#: round must be than the one before for another to be worth it.
MAX_ROUNDS = 5
SHRINK = 0.7
#: How long a live sync may take to finish its batch and pause.
PAUSE_TIMEOUT_S = 120.0


def wants_catch_up(pipeline: Pipeline) -> bool:
    return "sync" in pipeline.model_fields_set or any(idx.changes is not None for idx in pipeline.indexes)


def catch_up_group(job_id: str) -> str:
    return f"reindex:{job_id}"


def catch_up_consumer(aliases: Sequence[str]) -> str:
    """One consumer (slot) per set of aliases: a job started afresh reuses, never leaks, it."""
    return "rx" + hashlib.sha1(",".join(sorted(aliases)).encode()).hexdigest()[:10]


class CatchUp:
    def __init__(
        self,
        pipeline: Pipeline,
        source: Source,
        store: CoordinationStore,
        aliases: Sequence[str],
        spark: Callable[[], Any],
    ) -> None:
        self.pipeline = pipeline
        self.source = source
        self.store = store
        self.aliases = list(aliases)
        self.spark = spark
        self.offsets = OffsetStore(store.engine, pipeline.coordination.prefix)  # holds
        #: consumer positions, the catch-up's own and the live groups' it hands over to
        self.positions = open_consumer_offsets(
            pipeline, store.engine, lambda: open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
        )
        self.consumer = catch_up_consumer(self.aliases)
        self._changes: ChangeSource | None = None
        self._job: str | None = None

    def _source(self, consumer: str | None = None) -> ChangeSource:
        fanouts = [FanOut(resolve_consumer_plan(self.pipeline, self.source, a), self.source) for a in self.aliases]
        return open_change_source(self.pipeline, self.source, watched_tables(fanouts), consumer or self.consumer)

    # -- 1. before planning ------------------------------------------------------------------------
    def record_start(self, job_id: str, targets: dict[str, str]) -> None:
        """Record P0 for a new job (a fresh slot: one left by an abandoned job is dropped first)."""
        changes = self._source()
        try:
            changes.check()
            changes.drop()
            p0 = changes.start()
        finally:
            changes.close()
        self.positions.save(catch_up_group(job_id), {a: (changes.position(p0), p0, targets[a]) for a in self.aliases})
        log.info("reindex %s: changes from position %s on are caught up before the swap", job_id, p0)

    def active(self, job_id: str) -> bool:
        return bool(self.positions.offsets(catch_up_group(job_id)))

    def wrote(self, job_id: str, alias: str) -> bool:
        """Whether an earlier run's catch-up already wrote into the new version (so its document
        count no longer equals what the partitions acknowledged)."""
        saved = self.positions.offsets(catch_up_group(job_id)).get(alias)
        return saved is not None and (saved.applied > 0 or saved.deleted > 0)

    # -- 2. and 3. before the swap -------------------------------------------------------------------
    def before_swap(self, job_id: str, targets: dict[str, str]) -> None:
        self._job = job_id
        lag = self.pipeline.sync.catch_up_lag_s
        previous: float | None = None
        for n in range(MAX_ROUNDS):
            started = time.monotonic()
            summary = self._round(job_id, targets)
            took = time.monotonic() - started
            log.info(
                "catch-up round %d: %d applied, %d deleted in %.1f s", n + 1, summary.applied, summary.deleted, took
            )
            # Done when close to the head, or when rounds stop getting shorter: under a steady
            # stream of writes each round takes its own start-up time plus what came meanwhile.
            if took <= lag or summary.applied + summary.deleted == 0 or (previous and took > SHRINK * previous):
                break
            previous = took
        for alias in self.aliases:
            self.offsets.hold(alias, self._holder(job_id))
        try:
            self._wait_for_paused_syncs(job_id)
            self._live_consumer().start()  # the slot the sync continues from exists before the last round
            self._round(job_id, targets)
        except BaseException:
            self.release(job_id)
            raise

    def _round(self, job_id: str, targets: dict[str, str]) -> Any:
        run = SyncRun(
            self.pipeline,
            self.aliases,
            group=catch_up_group(job_id),
            consumer=self.consumer,
            until_caught_up=True,
            spark_factory=self.spark,
            indexes=targets,
            lock=False,
            holder=self._holder(job_id),
        )
        return run.run()

    def _holder(self, job_id: str) -> str:
        return f"reindex:{job_id}"

    def _live_consumer(self) -> ChangeSource:
        return self._source(self.pipeline.sync.group)

    def _live_groups(self) -> set[str]:
        groups = {o.group for a in self.aliases for o in self.positions.groups_of(a)}
        return {g for g in groups if not g.startswith("reindex:")} | {self.pipeline.sync.group}

    def _wait_for_paused_syncs(self, job_id: str) -> None:
        """Wait until every running sync of a group that feeds these aliases has paused them."""
        deadline = time.monotonic() + PAUSE_TIMEOUT_S
        while True:
            running = [g for g in self._live_groups() if self._running(g)]
            holds = self.offsets.holds(self.aliases)
            waiting = [a for a in self.aliases if running and holds.get(a) and holds[a].paused_by is None]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TransientError(
                    f"live sync(s) of group(s) {', '.join(running)} did not pause alias(es) {', '.join(waiting)} "
                    f"within {PAUSE_TIMEOUT_S:.0f} s; the alias was not swapped (rerun to resume)"
                )
            time.sleep(0.1)

    def _running(self, group: str) -> bool:
        lock = self.store.locks.get(sync_lock_key(group))
        return lock is not None and lock.expires_at > time.time()

    # -- 4. after the swap ---------------------------------------------------------------------------
    def after_swap(self, job_id: str, targets: dict[str, str]) -> None:
        """Hand the aliases over to the live groups at the caught-up position, release the holds,
        and drop the job's own slot and offsets."""
        done = self.positions.offsets(catch_up_group(job_id))
        for group in self._live_groups():
            current = self.positions.offsets(group)
            handed = {}
            for alias in self.aliases:
                caught = done.get(alias)
                if caught is None:
                    raise PermanentError(f"reindex {job_id}: no caught-up position for alias {alias!r}")
                mine = current.get(alias)
                if mine is not None and mine.position > caught.position:
                    raise PermanentError(
                        f"group {group!r} applied alias {alias!r} up to {mine.position}, past the catch-up's "
                        f"{caught.position}, while it was held"
                    )
                handed[alias] = (caught.position, caught.offset, targets[alias])
            self.positions.save(group, handed)
        self.release(job_id)
        changes = self._source()
        try:
            changes.drop()
        finally:
            changes.close()
        self.positions.forget(catch_up_group(job_id))

    def release(self, job_id: str) -> None:
        for alias in self.aliases:
            self.offsets.release(alias, self._holder(job_id))
