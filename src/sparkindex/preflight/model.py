"""One preflight check's result, the options every check reads, and how results are shown.

A check is one line a person can act on: what was looked at (``name``), what was found
(``detail``) and what to do about it (``fix``). Detail and fix are passed through
:func:`~sparkindex.config.secrets.redact_url` when the result is made, so a password in a URL
that a driver quotes back in its error never reaches a terminal, a log or the JSON output.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkindex.config.secrets import error_line, redact_url

Status = Literal["OK", "WARN", "FAIL"]
#: ``check`` runs everything; a run's hook runs what that run needs (see :mod:`.runner`)
#: which run the checks are for: ``check`` (everything, with advice), a ``reindex``, a ``sync``, or
#: ``documents``: a run that reads the source and writes documents but captures no changes (verify,
#: repair, re-drive, the deferred refresh), which needs no change-capture prerequisite
Scope = Literal["check", "reindex", "sync", "documents"]

#: exit codes of ``sparkindex check`` (docs/operations.md, "Exit codes": 2 is bad usage or config)
EXIT = {"OK": 0, "WARN": 1, "FAIL": 2}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None
    #: a FAIL that comes and goes with a server (unreachable, refused connections): ``check``
    #: reports it, but a run's hook leaves it to the run, which treats it as transient (exit 3,
    #: retried or resumed): a database restarting must never look like a configuration error
    transient: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", redact_url(self.detail))
        if self.fix is not None:
            object.__setattr__(self, "fix", redact_url(self.fix))

    @property
    def blocking(self) -> bool:
        """Whether this result stops a run (only a FAIL that is not transient)."""
        return self.status == "FAIL" and not self.transient

    def line(self) -> str:
        """The one line shown for this check, the same in ``check`` and in a run's fast fail."""
        text = f"{self.status:<4} {self.name}: {self.detail}"
        if self.fix and self.status != "OK":
            text += f" | fix: {self.fix}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


def ok(name: str, detail: str) -> Check:
    return Check(name, "OK", detail)


def warn(name: str, detail: str, fix: str | None = None) -> Check:
    return Check(name, "WARN", detail, fix)


def fail(name: str, detail: str, fix: str | None = None, *, transient: bool = False) -> Check:
    return Check(name, "FAIL", detail, fix, transient)


@dataclass(frozen=True)
class Options:
    """What a preflight looks at, and the thresholds of its warnings."""

    scope: Scope = "check"
    #: aliases to check (default: every index of the pipeline)
    aliases: Sequence[str] | None = None
    #: probes that write and undo (a throwaway index, a table in the store, a temporary slot);
    #: ``check`` runs them, a run's hook does not (the run itself does those writes at once)
    probe_writes: bool = True
    #: Tantivy: warn when the index directory's file system has less free space than this
    min_free_disk_bytes: int = 1 << 30
    #: MariaDB: warn when binlogs expire sooner than this (a sync stopped longer hits a gap)
    min_binlog_retention_s: float = 7 * 86400.0
    #: seconds to wait for a server to answer a probe (a connect, a TCP handshake)
    connect_timeout_s: float = 5.0
    #: the run adopts an index that bears an alias's name (``reindex --adopt``)
    adopt: bool = False
    #: the master of a SparkSession the caller hands in: it, not the pipeline's ``spark.master``,
    #: says where tasks run (the pipeline's ``spark`` section is then not used)
    session_master: str | None = None


first_line = error_line  # one helper for every error line shown to a person


def existing_ancestor(path: Path) -> Path:
    """*path*, or its nearest ancestor that exists: where a directory made later would go."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


#: words of a refusal that waiting does not cure: a login, a database or a privilege
_REFUSALS = ("authentication", "password", "denied", "does not exist", "pg_hba.conf", "unknown database")


def unreachable(exc: BaseException) -> bool:
    """Whether a failed connect looks like a server that is not there (yet): refused, timed out,
    starting up, too busy. A refused login or an unknown database is not: it stays until fixed."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return not any(word in text for word in _REFUSALS)


def overall(checks: Iterable[Check]) -> Status:
    statuses = {c.status for c in checks}
    return "FAIL" if "FAIL" in statuses else "WARN" if "WARN" in statuses else "OK"


def exit_code(checks: Iterable[Check]) -> int:
    """0 when every check passed, 1 with warnings only, 2 on any failure."""
    return EXIT[overall(checks)]


def report(checks: Sequence[Check]) -> dict[str, Any]:
    """The ``--json`` object: every check, and ``ok`` (nothing failed: a run would start)."""
    return {"checks": [c.to_json() for c in checks], "ok": overall(checks) != "FAIL"}
