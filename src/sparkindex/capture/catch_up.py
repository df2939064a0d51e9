"""Changes committed to the source during a full reindex are in the new index when
the alias moves.

search-center's "floating garbage" step, made exact with the change log (log replay after the
snapshot, re-reading rows by key; not DBLog's watermarks):

1. Before the partitions are planned, the log position P0 is recorded for the aliases being
   rebuilt (on PostgreSQL a slot of the job's own is created: its consistent point is P0, and it
   keeps the WAL from there). Every partition reads after P0, so whatever committed before P0 is in
   what the partitions read, and whatever committed after it is in the log.
2. After the last partition (and the count check), every change since P0 is replayed into the new
   versions, in rounds, until a round had little left (``sync.catch_up_lag_s``).
3. Live syncs of the aliases are asked to pause (a hold in the store, a lease renewed while the
   reindex needs it: :mod:`.hold_keeper`); the reindex waits for exactly the running syncs that
   serve a held alias (they announce what they serve), each of which answers with the position it
   had applied. The consumer group the sync will continue with is made sure to exist (its slot
   created), and a last round replays up to the head: the new versions now hold every change up
   to a position Pc that is at or past every paused sync's, and never below the live slot.
4. The alias is swapped (fenced, by finalize), and the swap recorded in the store. Each live
   group's offset for the alias moves to Pc on the new version, the holds are released (always,
   in ``finally``), and the syncs continue from there: nothing between is lost, nothing is applied
   to the new version by two writers at once. A rerun after a failure between the swap and the
   hand-over finishes the hand-over; a reindex killed while holding leaves syncs paused for one
   lease (:data:`~sparkindex.coordination.holds.HOLD_TTL_S`) at most.

Which reindexes catch up does not depend on a YAML key. Where the source can capture changes
(logical decoding, a binlog, ``changes:``), a reindex catches up as above when the alias could be
synced: a ``sync:`` section or ``changes:`` asks for it, a consumer group has an offset for the
alias that its log still serves, or a running sync serves it. Otherwise it records P0 cheaply,
leaving nothing on the server (the head position, no slot), and after the swap gives the live
group (``sync.group``) an offset at P0 on the new version: the first sync continues from P0
(exactly, by MariaDB GTID) or, on PostgreSQL where no slot kept the WAL, finds the gap and
reconciles it (:mod:`sparkindex.capture.sync.gaps`). A source that cannot capture changes (SQLite without ``changes:``,
a server without ``wal_level = logical``) gets nothing recorded.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkindex.capture.catch_up_round import CatchUpRound
from sparkindex.capture.consumer_offsets import open_consumer_offsets
from sparkindex.capture.fanout import FanOut
from sparkindex.capture.hold_keeper import HoldKeeper
from sparkindex.capture.session import watched_tables
from sparkindex.capture.source import LOG_SOURCES, open_change_source, source_kind
from sparkindex.capture.sync.gaps import find_gaps
from sparkindex.capture.sync_lock import source_key, sync_lock_key
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import GroupOffset
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import ConfigError, PermanentError, TransientError
from sparkindex.resources import open_target
from sparkindex.sources.base import Source
from sparkindex.sources.change_source import ChangeSource
from sparkindex.targets.target import Target

log = logging.getLogger(__name__)

#: Rounds before the live syncs are paused for the last one, at most; and how much shorter a
#: round must be than the one before for another to be worth it.
MAX_ROUNDS = 5
SHRINK = 0.7
#: How long a live sync may take to finish its batch and pause.
PAUSE_TIMEOUT_S = 120.0


def wants_catch_up(pipeline: Pipeline) -> bool:
    """Whether the pipeline asks for change capture in so many words (then a source that cannot
    capture is an error, as for ``sync``)."""
    return "sync" in pipeline.model_fields_set or any(idx.changes is not None for idx in pipeline.indexes)


def may_catch_up(pipeline: Pipeline, source: Source) -> bool:
    """Whether a reindex should look at change capture at all: asked for, or a log-based source
    (whether its server has logical decoding or a binlog is found out by :meth:`CatchUp.record_start`)."""
    if wants_catch_up(pipeline):
        return True
    try:
        return source_kind(pipeline, source) in LOG_SOURCES.values()
    except ConfigError:
        return False


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
        plans: Mapping[str, IndexPlan],
    ) -> None:
        self.pipeline = pipeline
        self.plans = dict(plans)  # the job's: rounds build the new version from the plans it started with
        self.source = source
        self.store = store
        self.aliases = list(aliases)
        self.spark = spark
        self.holds = store.sync_holds  # holds, presence and hand-over records
        #: consumer positions, the catch-up's own and the live groups' it hands over to
        self._offsets_target: Target | None = None  # opened only for `sync.offsets: target`
        self.positions = open_consumer_offsets(pipeline, store, self._target)
        self.consumer = catch_up_consumer(self.aliases)
        self.run = uuid.uuid4().hex[:8]  # this driver's holds: a rerun's are never taken for ours
        self.keeper: HoldKeeper | None = None

    def _target(self) -> Target:
        if self._offsets_target is None:
            self._offsets_target = open_target(self.pipeline)
        return self._offsets_target

    def close(self) -> None:
        """Close what the catch-up opened itself (the source and the store are the reindex's)."""
        self.release()
        target, self._offsets_target = self._offsets_target, None
        if target is not None:
            try:
                target.close()
            except Exception as exc:  # noqa: BLE001 - the job's own outcome and its locks come first
                log.warning("closing the catch-up's offsets target: %s", exc)

    def _source(self, consumer: str | None = None) -> ChangeSource:
        fanouts = [FanOut(self.plans[a], self.source) for a in self.aliases]
        return open_change_source(self.pipeline, self.source, watched_tables(fanouts), consumer or self.consumer)

    def holder(self, job_id: str) -> str:
        return f"reindex:{job_id}:{self.run}"

    # -- 1. before planning ------------------------------------------------------------------------
    def record_start(self, job_id: str, targets: dict[str, str]) -> None:
        """Record P0 for a new job: with a slot of the job's own (one left by an abandoned job is
        dropped first) when the aliases could be synced, else the head alone; nothing when the
        source cannot capture changes."""
        mode = self._mode()
        if mode is None:
            return
        changes = self._source()
        try:
            changes.prepare()
            changes.drop()  # a slot an abandoned job of these aliases left
            if mode == "catch-up":
                p0 = changes.start()
                self.positions.save(
                    catch_up_group(job_id), {a: (changes.position(p0), p0, targets[a]) for a in self.aliases}
                )
            else:
                p0 = changes.head()
                self.holds.record_starts(job_id, {a: (changes.position(p0), p0, targets[a]) for a in self.aliases})
        finally:
            changes.close()
        log.info("reindex %s (%s): changes from position %s on are handed on", job_id, mode, p0)

    def _mode(self) -> str | None:
        """The mode: ``catch-up``, ``start`` (P0 only) or None (the source cannot capture changes).
        Unasked, a source that refuses change capture (no logical decoding, no binlog, a table
        without a key, missing grants) is no reason to fail the reindex: nothing is recorded."""
        asked = wants_catch_up(self.pipeline)
        changes = None
        try:
            changes = self._source()
            changes.check()
        except (ConfigError, PermanentError) as exc:
            if asked:
                raise
            log.info("no change capture for %s, no log position recorded: %s", ", ".join(self.aliases), exc)
            return None
        finally:
            if changes is not None:
                changes.close()
        return "catch-up" if asked or self._synced() else "start"

    def _synced(self) -> bool:
        """Whether a running sync serves one of the aliases, or a consumer group has an offset for
        one that its log still serves (a group whose slot is gone reconciles anyway: no slot is
        made for it here)."""
        if self.holds.serving(self.aliases):
            return True
        for group in self._live_groups(with_default=False):
            stored = self.positions.offsets(group)
            changes = self._source(group)
            try:
                changes.prepare()
                if any(changes.continuity(stored[a].offset) is None for a in self.aliases if a in stored):
                    return True
            except PermanentError as exc:
                log.warning("consumer group %r cannot continue from its offsets: %s", group, exc)
            finally:
                changes.close()
        return False

    def active(self, job_id: str) -> bool:
        """Whether the job catches up (it has a slot and offsets of its own)."""
        return bool(self.positions.offsets(catch_up_group(job_id)))

    def lost_log(self, job_id: str) -> str | None:
        """Why the job's catch-up can no longer replay what committed since its start (binlogs
        purged past its position, its slot dropped), or None. Such a job cannot be resumed: its
        new versions would miss those changes for good, and every rerun would refuse the swap
        on the same gap. A job that swapped already is past its catch-up (its hand-over stands)."""
        group = catch_up_group(job_id)
        saved = self.positions.offsets(group)
        if not saved or self.swapped(job_id):
            return None
        changes = self._source()
        try:
            changes.prepare()
            gaps = find_gaps(changes, group, saved, self.aliases, lambda _alias: None)
        finally:
            changes.close()
        return "; ".join(sorted({g.reason for g in gaps})) or None

    def abandon(self, job_id: str) -> None:
        """A job that will not be resumed forgets its catch-up position (the consumer, its slot,
        is shared with the job that starts afresh)."""
        self.positions.forget(catch_up_group(job_id))

    def withdraw(self, job_id: str) -> None:
        """A new job refused before its first read: its slot dropped (else it would hold the
        primary's WAL or binlog until the next job of these aliases), its position and its
        hand-over records forgotten."""
        if self._mode() is not None:
            self._drop_slot()
        self.positions.forget(catch_up_group(job_id))
        self.holds.forget_handover(job_id)

    def _drop_slot(self) -> None:
        """Drop the job's own slot, which would otherwise hold the primary's log."""
        changes = self._source()
        try:
            changes.drop()
        finally:
            changes.close()

    def wrote(self, job_id: str, alias: str) -> bool:
        """Whether an earlier run's catch-up already wrote into the new version (so its document
        count no longer equals what the partitions acknowledged)."""
        saved = self.positions.offsets(catch_up_group(job_id)).get(alias)
        return saved is not None and (saved.applied > 0 or saved.deleted > 0)

    def swapped(self, job_id: str) -> dict[str, str]:
        """alias -> index, for the swaps this job recorded (an earlier run failed after them)."""
        return self.holds.swaps(job_id)

    # -- 2. to 4. ----------------------------------------------------------------------------------
    def swap_and_hand_over(
        self,
        job_id: str,
        targets: Mapping[str, str],
        pending: Mapping[str, str],
        swap: Callable[[str, str], None],
        fence: Mapping[str, int],
    ) -> None:
        """Catch up, hold, swap each alias of *pending* with *swap* (recording each swap), hand
        over, release. Aliases not in *pending* were swapped by an earlier run of the job: their
        hand-over is finished without catching up again."""
        full = self.active(job_id)
        if not full and not self.holds.starts(job_id):
            for alias, index in pending.items():  # nothing recorded: nothing to hand over
                swap(alias, index)
            return
        try:
            if full and pending:
                self._rounds(job_id, targets)
            self.keeper = HoldKeeper(self.holds, self.aliases, self.holder(job_id))
            self.keeper.start()
            self._wait_for_paused_syncs()
            if full and pending:
                self._last_round(job_id, targets)
            for alias, index in pending.items():
                self.keeper.check()
                swap(alias, index)
                self.holds.record_swap(job_id, alias, index, fence.get(alias))
            self._hand_over(job_id, targets, full)
        finally:
            self.release()

    def _rounds(self, job_id: str, targets: Mapping[str, str]) -> None:
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

    def _round(self, job_id: str, targets: Mapping[str, str]) -> Any:
        return CatchUpRound(
            self.pipeline,
            self.aliases,
            group=catch_up_group(job_id),
            consumer=self.consumer,
            indexes=targets,
            plans=self.plans,
            spark_factory=self.spark,
        ).run()

    def _last_round(self, job_id: str, targets: Mapping[str, str]) -> None:
        """The live group's slot is made (at S) and the head H read, then the last round replays
        up to the head. Pc, the position handed over, must not be below S (the live slot would be
        ahead of its stored offset: a gap); a round that found nothing after its last change
        leaves Pc there, so Pc becomes H when the log proves nothing is pending up to H."""
        live = self._source(self.pipeline.sync.group)
        try:
            live.prepare()
            slot = live.position(live.start())
            head = live.head()
        finally:
            live.close()
        self._round(job_id, targets)
        done = self.positions.offsets(catch_up_group(job_id))
        changes = self._source()
        try:
            behind = {a: o for a, o in done.items() if o.position < slot}
            if not behind or changes.position(head) < slot:
                return
            start = min(behind.values(), key=lambda o: o.position).offset
            try:
                pending = changes.pending(start, head)
            except (TransientError, PermanentError) as exc:
                pending, reason = True, str(exc)
            else:
                reason = "changes pending up to the head"
            if pending:
                log.warning("caught-up position below the live slot's %s, left as it is: %s", slot, reason)
                return
            self.positions.save(catch_up_group(job_id), {a: (changes.position(head), head, targets[a]) for a in behind})
        finally:
            changes.close()

    def _wait_for_paused_syncs(self) -> None:
        """Wait until every running sync serving a held alias has paused it."""
        deadline = time.monotonic() + PAUSE_TIMEOUT_S
        while True:
            waiting = self._unpaused()
            if not waiting:
                return
            if self.keeper is not None and self.keeper.lost:
                raise TransientError(f"{self.keeper.lost}; the alias was not swapped (rerun to resume)")
            if time.monotonic() > deadline:
                raise TransientError(
                    f"live sync(s) {'; '.join(waiting)} did not pause within {PAUSE_TIMEOUT_S:.0f} s; "
                    "the alias was not swapped (rerun to resume)"
                )
            time.sleep(0.1)

    def _unpaused(self) -> list[str]:
        """The running syncs that serve a held alias and have not paused it for our hold."""
        holder = self.keeper.holder if self.keeper is not None else ""
        everyone = self.holds.presence()
        waiting = [
            f"{p.holder} (group {p.group}, alias {p.alias})"
            for p in everyone
            if p.alias in self.aliases and p.paused_for != holder
        ]
        # A sync that announces nothing (started by an older version) is waited for by the rule
        # before presence records: a running sync of a group that feeds these aliases, answered
        # by a pause of every held alias.
        announced = {p.holder for p in everyone}
        legacy = [h for g in self._live_groups() for h in self._sync_holders(g) if h not in announced]
        if legacy:
            holds = self.holds.holds(self.aliases)
            silent = [a for a in self.aliases if a not in holds or holds[a].paused_by is None]
            waiting += [f"{h} (alias {a})" for h in legacy for a in silent]
        return waiting

    def _sync_holders(self, group: str) -> list[str]:
        """The running syncs of *group* on this source (by their lock; the lock without the
        source is an older version's)."""
        keys = [sync_lock_key(group, source_key(self.pipeline)), sync_lock_key(group)]
        return [lock.holder for lock in self.store.locks.unexpired(keys)]

    def _live_groups(self, with_default: bool = True) -> set[str]:
        groups = {o.group for a in self.aliases for o in self.positions.groups_of(a)}
        live = {g for g in groups if not g.startswith("reindex:")}
        return live | {self.pipeline.sync.group} if with_default else live

    def _hand_over(self, job_id: str, targets: Mapping[str, str], full: bool) -> None:
        """Each live group's offset moves to the caught-up position (P0 without a catch-up) on the
        new version, unless the group serves that version already from further on (a sync that
        carried on after an earlier run's holds ran out); then the job's own slot and records go."""
        if full:
            caught = {a: (o.position, o.offset) for a, o in self.positions.offsets(catch_up_group(job_id)).items()}
        else:
            caught = self.holds.starts(job_id)
        missing = [a for a in self.aliases if a not in caught]
        if missing:
            raise PermanentError(f"reindex {job_id}: no caught-up position for alias(es) {', '.join(missing)}")
        for group in sorted(self._live_groups()):
            current = self.positions.offsets(group)
            handed = {}
            for alias in self.aliases:
                position, offset = caught[alias]
                mine: GroupOffset | None = current.get(alias)
                if mine is not None and mine.position > position:
                    if mine.index == targets[alias]:
                        continue
                    log.warning(
                        "group %r applied alias %r up to %s on %s, past the %s handed over: it replays from there "
                        "(or reconciles, if its log no longer serves it)",
                        group,
                        alias,
                        mine.position,
                        mine.index,
                        position,
                    )
                handed[alias] = (position, offset, targets[alias])
            if handed:
                self.positions.save(group, handed)
        if full:
            self._drop_slot()
            self.positions.forget(catch_up_group(job_id))
        self.holds.forget_handover(job_id)

    def release(self) -> None:
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            keeper.release()
