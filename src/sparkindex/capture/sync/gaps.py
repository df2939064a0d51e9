"""A sync never carries on past a gap in its log as if nothing happened.

A gap is a stored position the log can no longer serve: a slot dropped and created again (it
starts at the head of the WAL), a slot advanced by someone else, binlogs purged past the stored
GTID, or an alias whose index exists but whose consumer group has no offset (built without a
catch-up, or before the group existed). What committed in between is gone from the log, and only
comparing the log with the stored offsets tells that apart from a quiet database.

A gap is healed (``sync.on_gap: reconcile``): the source's position now, P, is taken first (the
slot exists again, or the GTID head is read), then the Spark-partitioned verify/repair makes the
aliases equal to the source (every row read after P, so whatever committed before P is in it),
and only then is P stored, so the stream continues from P. A crash during the repair leaves the
old offset stored: the next start finds the same gap and reconciles again. Or it is refused
(``fail``): exit 3 with a message naming the alias, the stored position, what the log can serve,
and the command that repairs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from sparkindex.capture.sync.feed import Feed
from sparkindex.capture.sync.state import RunState
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import error_line
from sparkindex.coordination.offsets import GroupOffset
from sparkindex.errors import LogGap, TransientError
from sparkindex.sources.change_source import ChangeSource, Gap
from sparkindex.sources.replica import ReplicaBehind


class ReplicaLagging(TransientError):
    """A gap's reconcile found the read replica behind for longer than
    ``source.max_replica_lag_s``: retried later (exit 3), unlike a reindex's refusal."""


log = logging.getLogger(__name__)

#: the drift kinds a reconciliation reports per alias
RECONCILED_KINDS = ("missing", "stale", "extra", "duplicates")


@dataclass(frozen=True)
class AliasGap:
    alias: str
    reason: str
    #: the stored position, None when the group holds no offset for the alias
    stored: int | None
    available: int | None = None


def find_gaps(
    changes: ChangeSource,
    group: str,
    saved: Mapping[str, GroupOffset],
    aliases: Sequence[str],
    index_of: Callable[[str], str | None],
) -> list[AliasGap]:
    """The aliases whose stored offset the log cannot serve, or that have an index but no offset."""
    gaps: list[AliasGap] = []
    checked: dict[bytes, Gap | None] = {}  # aliases of one group usually share one offset
    for alias in aliases:
        stored = saved.get(alias)
        if stored is None:
            index = index_of(alias)
            if index is not None:
                gaps.append(
                    AliasGap(
                        alias,
                        f"alias {alias!r} points at index {index!r}, but consumer group {group!r} holds no offset "
                        "for it (built without change capture, or before the group existed): what committed since "
                        "it was built is not in the log this group reads",
                        None,
                    )
                )
            continue
        key = orjson.dumps(stored.offset, option=orjson.OPT_SORT_KEYS)
        if key not in checked:
            checked[key] = changes.continuity(stored.offset)
        gap = checked[key]
        if gap is not None:
            gaps.append(AliasGap(alias, gap.reason, gap.stored, gap.available))
    return gaps


def refusal(pipeline: Pipeline, group: str, gaps: Sequence[AliasGap]) -> LogGap:
    """``sync.on_gap: fail``: the error that names every gap and how to repair it."""
    lines = [
        f"alias {g.alias!r}: stored position {g.stored if g.stored is not None else 'none'}, "
        f"the log serves from {g.available if g.available is not None else 'its head only'}: {g.reason}"
        for g in gaps
    ]
    first = gaps[0]
    return LogGap(
        f"consumer group {group!r} cannot continue: the change log has a gap ({'; '.join(lines)}). Nothing was "
        f"applied. To repair: `sparkindex sync -c {pipeline.origin} --group {group} --on-gap reconcile` (verifies and "
        "repairs the aliases on Spark, then streams from the log's position now)",
        alias=first.alias,
        stored=first.stored,
        available=first.available,
    )


def reconcile(
    pipeline: Pipeline, aliases: Sequence[str], spark: Callable[[], Any], store: Any
) -> tuple[dict[str, dict[str, int]], int]:
    """Verify and repair *aliases* on Spark, as ``verify --repair`` does. Returns what the first
    pass found per alias, and how many documents the target rejected (dead-lettered)."""
    from sparkindex.verify.run import run_verify

    try:
        outcome = run_verify(
            pipeline,
            list(aliases),
            repair_drift=True,
            spark_factory=spark,
            trigger="sync-gap",
            store=store,
            check_after=False,  # the stream from P applies what was written meanwhile
        )
    except ReplicaBehind as exc:
        # a lag spike of source.read_url: the next attempt may find it caught up, so the sync
        # must not stop for good (exit 2) over it; nothing was applied, the offsets stand
        raise ReplicaLagging(f"reconciling the gap waits for source.read_url: {exc}") from exc
    found = outcome.before if outcome.before is not None else outcome.reports
    reconciled = {r.alias: {k: int(getattr(r, k)) for k in RECONCILED_KINDS} for r in found}
    rejected = sum((r.repaired or {}).get("failed", 0) for r in found)
    return reconciled, rejected


class GapHealer:
    """Proves the log can serve the stored offsets of a stream run, and heals or refuses gaps.

    A live sync reconciles (``sync.on_gap: reconcile``) or refuses (``fail``); a reindex's
    catch-up always refuses, since it cannot repair a version nobody reads yet: its job fails,
    and ``reindex --new`` starts afresh.
    """

    def __init__(
        self,
        feed: Feed,
        state: RunState,
        *,
        on_gap: Literal["reconcile", "fail"],
        index_of: Callable[[str], str | None],
        spark: Callable[[], Any],
        count: Callable[[str, str], None],
    ) -> None:
        self.feed = feed
        self.state = state
        self.on_gap = on_gap
        #: the index an alias points at (a catch-up's versions are pointed at by none yet)
        self.index_of = index_of
        self.spark = spark
        self.count = count

    def heal(self) -> bool:
        """Find the aliases whose stored offset the log cannot serve; reconcile them (the position
        now first, then verify/repair on Spark, then that position stored) or refuse. True when
        a gap was healed."""
        feed = self.feed
        gaps = find_gaps(feed.changes, feed.group, feed.positions.offsets(feed.group), feed.aliases, self.index_of)
        if not gaps:
            return False
        for gap in gaps:
            self.count("gap", f"{gap.alias}: {gap.reason}")
        recorded = self._gaps_found(gaps)
        if self.on_gap == "fail":
            error = refusal(feed.pipeline, feed.group, gaps)
            self._gaps_ended(recorded, "refused", detail=str(error))
            raise error
        self.state.reconciling.set()  # the run's health says so (a scrape of sync --metrics-port)
        try:
            self._reconcile(gaps, recorded)
        except BaseException as exc:
            # a log gone backwards is refused; anything else leaves the gap for the next start
            self._gaps_ended(recorded, "refused" if isinstance(exc, LogGap) else "failed", detail=error_line(exc))
            raise
        finally:
            self.state.reconciling.clear()
        self.state.advanced()  # the stream continues from P: its stall clock starts there
        return True

    def _gaps_found(self, gaps: Sequence[AliasGap]) -> dict[str, str]:
        """Each gap as a row of the group's history (the page's); best effort, as counting is:
        a store that cannot take the row must not decide whether the gap is healed."""
        recorded: dict[str, str] = {}
        for gap in gaps:
            try:
                recorded[gap.alias] = self.feed.events.gap_found(
                    self.feed.group, gap.alias, gap.reason, gap.stored, gap.available
                )
            except Exception as exc:  # noqa: BLE001 - the history is best effort, but an operator must hear of a hole in it
                log.warning("could not record the gap of %s in the store's history: %s", gap.alias, exc)
        return recorded

    def _gaps_ended(
        self,
        recorded: Mapping[str, str],
        outcome: Literal["reconciled", "refused", "failed"],
        *,
        detail: str | None = None,
        positions: Mapping[str, int] | None = None,
        found: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        for alias, gap_id in recorded.items():
            try:
                self.feed.events.gap_ended(
                    gap_id,
                    outcome,
                    position=None if positions is None else positions.get(alias),
                    found=None if found is None else found.get(alias),
                    detail=detail,
                )
            except Exception as exc:  # noqa: BLE001 - the history is best effort, but an operator must hear of a hole in it
                log.warning("could not record how the gap of %s ended in the store's history: %s", alias, exc)

    def _reconcile(self, gaps: list[AliasGap], recorded: Mapping[str, str]) -> None:
        feed, changes, group = self.feed, self.feed.changes, self.feed.group
        aliases = sorted({g.alias for g in gaps})
        for gap in gaps:
            log.warning("gap in the change log of group %r: %s; reconciling", group, gap.reason)
        now = changes.start()  # P: the log serves everything after it from here on
        behind = [g for g in gaps if g.stored is not None and changes.position(now) < g.stored]
        if behind:
            # Positions are the documents' external versions: from a log whose positions went
            # backwards (another server, a restored or reset one) every later write would lose to
            # what the index holds and be skipped as obsolete. Only a rebuild starts afresh.
            raise LogGap(
                f"consumer group {group!r}: the log now starts at position {changes.position(now)}, "
                f"below the stored {', '.join(f'{g.alias}: {g.stored}' for g in behind)} (another server, or a "
                "restored or reset one): writes ordered by those positions would be rejected as obsolete. Rebuild "
                f"with `sparkindex reindex -c {feed.pipeline.origin} --new`, then sync",
                alias=behind[0].alias,
                stored=behind[0].stored,
                available=changes.position(now),
            )
        at_p = {a: feed.target.alias_target(a) for a in aliases}
        found, rejected = reconcile(feed.pipeline, aliases, self.spark, feed.store)
        # P is stored only where the alias still points at the index the repair made equal to
        # the source: a reindex that swapped it meanwhile handed the group its own position on
        # the new version, which stands (storing P there would skip what the new version lacks)
        kept = {a: idx for a, idx in at_p.items() if idx is not None and feed.target.alias_target(a) == idx}
        for alias in sorted(set(aliases) - set(kept)):
            log.warning("alias %s was swapped while its gap was reconciled: the reindex's hand-over stands", alias)
        if kept:
            feed.positions.save(group, {a: (changes.position(now), now, idx) for a, idx in kept.items()})
        self.state.totals.reconciled.update(found)
        self.state.totals.failed += rejected
        notes = [f"{rejected} document(s) rejected by the target (dead letters)"] if rejected else []
        swapped = sorted(set(aliases) - set(kept))
        if swapped:
            notes.append(f"swapped meanwhile, the reindex's hand-over stands: {', '.join(swapped)}")
        self._gaps_ended(
            recorded,
            "reconciled",
            positions={a: changes.position(now) for a in kept},
            found=found,
            detail="; ".join(notes) or None,
        )
        self.state.acked = None  # the stream starts again from the stored offsets
        log.warning(
            "group %r: gap reconciled from position %s on: %s",
            group,
            changes.position(now),
            "; ".join(f"{a}: " + ", ".join(f"{n} {k}" for k, n in c.items()) for a, c in found.items()),
        )
