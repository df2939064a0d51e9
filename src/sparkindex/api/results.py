"""What the front door's calls return: frozen records with the fields of the CLI's ``--json``, an
:class:`Outcome` a scheduler branches on (calls that run a job), and the exit code the CLI would
give. Where a result's JSON is more than its fields, ``to_dict()`` is exactly the command's
``--json`` object: the CLI prints it, so the two cannot drift apart."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # for annotations only: the CLI imports this package on every start
    from sparkindex.coordination.records import DeadLetter
    from sparkindex.coordination.retention import Kept
    from sparkindex.targets.base import SearchHit


class Outcome(StrEnum):
    """How a call ended: done, done with errors (dead letters, drift, warnings), failed, or
    stopped on request (a rerun of a failed or stopped reindex resumes it)."""

    DONE = "DONE"
    DONE_WITH_ERRORS = "DONE_WITH_ERRORS"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for it (2, bad usage or config, is raised as ConfigError instead)."""
        return {"DONE": 0, "DONE_WITH_ERRORS": 1, "FAILED": 3, "STOPPED": 3}[self.value]

    @classmethod
    def of_exit_code(cls, code: int) -> Outcome:
        return {0: cls.DONE, 1: cls.DONE_WITH_ERRORS}.get(code, cls.FAILED)


@dataclass(frozen=True)
class ReindexResult:
    """``reindex --json``: the job's summary."""

    outcome: Outcome
    job_id: str
    status: str
    alias: str
    index: str
    source_rows: int
    indexed: int
    failed: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "outcome"}


@dataclass(frozen=True)
class SyncResult:
    """``sync --json``: what the run applied, where it stands, and any gap it reconciled."""

    outcome: Outcome
    applied: int
    deleted: int
    position: int
    lag_s: float
    failed: int
    batches: int
    group: str
    lag_bytes: int | None
    reconciled: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the aliases the run kept in step
    aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("outcome", "aliases")}


@dataclass(frozen=True)
class VerifyResult:
    """``verify --json`` (and ``verify --repair --json``): the final pass's totals; ``report`` is
    the whole JSON object, per alias and, after a repair, what the first pass found."""

    outcome: Outcome
    missing: int
    extra: int
    stale: int
    duplicates: int
    index_docs: int
    checked: int
    clean: bool
    run_id: str
    seconds: float
    report: dict[str, Any]


@dataclass(frozen=True)
class CheckResult:
    """``check --json``: every check (name, status, detail, fix) and whether a run would start."""

    outcome: Outcome
    ok: bool
    checks: tuple[dict[str, Any], ...]
    #: the CLI's: 0 all passed, 1 warnings only, 2 a failure
    exit_code: int
    #: each check as one line, as ``check`` prints it and a refused run quotes it
    lines: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"checks": list(self.checks), "ok": self.ok}


@dataclass(frozen=True)
class StatusResult:
    """``status --json``: the aliases' latest job (``job_id`` None before any) and last verify."""

    job_id: str | None
    status: str | None
    aliases: tuple[str, ...]
    report: dict[str, Any]


@dataclass(frozen=True)
class DeadLettersResult:
    """``dlq list --json``: the dead letters, newest first per alias."""

    letters: tuple[DeadLetter, ...]

    @property
    def count(self) -> int:
        return len(self.letters)

    def to_dict(self) -> dict[str, Any]:
        return {"dead_letters": [asdict(d) for d in self.letters], "count": self.count}


@dataclass(frozen=True)
class RedriveResult:
    """``dlq redrive --json``: what became of the letters tried (DONE_WITH_ERRORS: some still
    fail, or were left alone because their alias points at no index)."""

    outcome: Outcome
    run_id: str
    alias: str | None
    error_class: str | None
    attempted: int
    succeeded: int
    gone: int
    failed: int
    skipped: int
    #: the first of the letters that still fail: alias, doc_id, error_class, error, attempts
    still_failing: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        body = {k: v for k, v in asdict(self).items() if k != "outcome"}
        return {**body, "still_failing": list(self.still_failing), "notes": list(self.notes)}


@dataclass(frozen=True)
class GcResult:
    """``gc --json``: what was deleted (``dry_run``: what would be), and what was kept and why."""

    older_than_s: float
    cutoff: float
    dry_run: bool
    jobs_deleted: int
    #: the first of the jobs deleted (the count is whole)
    job_ids: tuple[str, ...]
    partitions_deleted: int
    dead_letters_deleted: int
    verify_runs_deleted: int
    versions_deleted: tuple[str, ...]
    kept: tuple[Kept, ...]
    #: transform-cache entries deleted, of aliases gone from the pipeline or whose index is gone
    transform_cache_deleted: int = 0
    #: the aliases those entries were of (each alias's entries go whole)
    transform_cache_aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        lists = {k: list(body[k]) for k in ("job_ids", "versions_deleted", "kept", "transform_cache_aliases")}
        return {**body, **lists}


@dataclass(frozen=True)
class StopResult:
    """``stop``: what was asked to stop. A sync stops after its batch in flight; a reindex hands
    its partitions back and ends STOPPED (a later reindex resumes it)."""

    kind: Literal["sync", "reindex"]
    #: the sync's lock holder, or the reindex job's id
    id: str
    #: "STOPPING" for a job; "stopping" for a sync
    status: str


@dataclass(frozen=True)
class SearchResult:
    """``search --json``: the hits, best first."""

    hits: tuple[SearchHit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"hits": [{"id": h.id, "score": h.score, "source": h.source} for h in self.hits]}


@dataclass(frozen=True)
class InitResult:
    """``init``: a pipeline for an existing database, as text (the CLI writes it to its file)."""

    text: str
    aliases: tuple[str, ...]
    #: root tables written commented out, with the reason
    left_out: dict[str, str]
    #: how changes would be captured: "log", "polling" or "none"
    capture: str
    #: environment variables the pipeline reads its secrets from
    variables: tuple[str, ...]
    #: tables in no document at all
    unreached: tuple[str, ...]


@dataclass(frozen=True)
class DropSlotResult:
    """``sync --drop-slot --json``: whether the group had a server-side slot to drop."""

    group: str
    dropped: bool

    def to_dict(self) -> dict[str, Any]:
        return {"dropped": self.dropped}


@dataclass(frozen=True)
class DeferredResult:
    """``sync --apply-deferred --json``: the recorded deferred changes applied."""

    outcome: Outcome
    records: int
    documents: int
    applied: int
    deleted: int
    failed: int

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "outcome"}
