"""What the front door's calls return: frozen records with the fields of the CLI's ``--json``, an
:class:`Outcome` a scheduler branches on, and the exit code the CLI would give."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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


@dataclass(frozen=True)
class StatusResult:
    """``status --json``: the aliases' latest job (``job_id`` None before any) and last verify."""

    job_id: str | None
    status: str | None
    aliases: tuple[str, ...]
    report: dict[str, Any]
